"""`gregor storage` as a user runs it (kafka-storage.sh's commands), and a KRaft node refusing to start on
a directory that is not formatted for its cluster and node."""

from __future__ import annotations

from pathlib import Path

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
