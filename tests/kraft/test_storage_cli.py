"""`gregor storage` as a user runs it (kafka-storage.sh's commands), and a KRaft node refusing to start on
a directory that is not formatted for its cluster and node."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.cli import gregor, one_line


def _config(tmp_path: Path, node_id: int = 1, extra: str = "") -> Path:
    p = tmp_path / f"node-{node_id}.properties"
    p.write_text(f"""process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={node_id}@127.0.0.1:39093
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:39093
controller.listener.names=CONTROLLER
log.dirs={tmp_path}/data-{node_id}-a,{tmp_path}/data-{node_id}-b
metadata.log.dir={tmp_path}/meta-{node_id}
{extra}""")
    return p


def test_random_uuid_and_format(tmp_path: Path) -> None:
    r = gregor("storage", "random-uuid")
    assert r.returncode == 0, r.stderr
    cid = one_line(r.stdout)
    assert len(cid) == 22
    cfg = _config(tmp_path)
    r = gregor("storage", "format", "--cluster-id", cid, "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Formatting") == 3
    for d in ("data-1-a", "data-1-b", "meta-1"):
        text = (tmp_path / d / "meta.properties").read_text()
        assert f"cluster.id={cid}" in text and "node.id=1" in text and "version=1" in text
    r = gregor("storage", "format", "-t", cid, "-c", str(cfg))
    assert r.returncode == 1 and "already formatted. Use --ignore-formatted" in one_line(r.stderr)
    r = gregor("storage", "format", "-t", cid, "-c", str(cfg), "--ignore-formatted")
    assert r.returncode == 0 and "already formatted" in r.stdout
    r = gregor("storage", "info", "-c", str(cfg))
    assert r.returncode == 0 and r.stdout.count(f"cluster.id={cid}") == 3


def test_format_refuses_bad_ids_and_non_kraft_configs(tmp_path: Path) -> None:
    r = gregor("storage", "format", "-t", "not-an-id", "-c", str(_config(tmp_path)))
    assert r.returncode == 2 and "not a valid id" in one_line(r.stderr)
    plain = tmp_path / "plain.properties"
    plain.write_text(f"log.dirs={tmp_path}/plain\n")
    r = gregor("storage", "format", "-t", "DSbdfr7ASR-4keHb9kqgBQ", "-c", str(plain))
    assert r.returncode == 2 and "does not set process.roles" in one_line(r.stderr)


def test_kraft_node_refuses_unformatted_and_foreign_dirs(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    r = gregor("serve", str(cfg), timeout_s=30)
    assert r.returncode == 1
    assert "No meta.properties found in" in r.stderr and "gregor storage format" in r.stderr
    gregor("storage", "format", "-t", "DSbdfr7ASR-4keHb9kqgBQ", "-c", str(cfg))
    (tmp_path / "data-1-b" / "meta.properties").write_text(
        "version=1\nnode.id=1\ncluster.id=4L6g3nShT-eMCtK--X86sw\n")
    r = gregor("serve", str(cfg), timeout_s=30)
    assert r.returncode == 1 and "Invalid cluster.id in:" in r.stderr and "4L6g3nShT-eMCtK--X86sw" in r.stderr


def test_format_add_scram_lets_clients_log_in_from_the_first_start(tmp_path: Path) -> None:
    """KIP-900: SCRAM credentials written by `format --add-scram` are in the metadata from the first start, so a
    client logs in over SASL/SCRAM with no AlterUserScramCredentials first; a wrong password is refused."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    from gregor.tools.local_broker import BrokerProcess
    from gregor.tools.ports import pick_port

    cport = pick_port()
    data = tmp_path / "data"
    props = {"process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": f"1@127.0.0.1:{cport}",
             "controller.listener.names": "CONTROLLER", "log.dirs": str(data),
             "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{cport}",
             "inter.broker.listener.name": "PLAINTEXT",
             "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    cfg = tmp_path / "node.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    bad = gregor("storage", "format", "-t", "DSbdfr7ASR-4keHb9kqgBQ", "-c", str(cfg),
                 "--add-scram", "SCRAM-SHA-256=[name=alice]")
    assert bad.returncode == 2 and "password is required" in one_line(bad.stderr)
    assert not (data / "meta.properties").exists()  # nothing formatted on a bad credential
    r = gregor("storage", "format", "-t", "DSbdfr7ASR-4keHb9kqgBQ", "-c", str(cfg),
               "--add-scram", 'SCRAM-SHA-256=[name=alice,password="s3cr,et",iterations=8192]')
    assert r.returncode == 0 and "1 user(s) with SCRAM credentials" in r.stdout, r.stdout + r.stderr
    node = BrokerProcess(data, props).start(timeout_s=60)
    try:
        sasl = {"bootstrap.servers": node.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice"}
        p = Producer({**sasl, "sasl.password": "s3cr,et", "acks": "all"})
        p.produce("logins", value=b"first")
        assert p.flush(30) == 0
        c = Consumer({**sasl, "sasl.password": "s3cr,et", "group.id": "g"})
        c.assign([TopicPartition("logins", 0, 0)])
        m = c.poll(20)
        assert m is not None and m.error() is None and m.value() == b"first"
        c.close()
        wrong = Producer({**sasl, "sasl.password": "nope", "message.timeout.ms": 5000})
        errors: list[str] = []
        wrong.produce("logins", value=b"x", on_delivery=lambda err, msg: errors.append(str(err)))
        wrong.flush(15)
        assert errors and errors[0] != "None"
        with pytest.raises(KafkaException):
            wrong.list_topics(timeout=3)
    finally:
        node.kill()
