"""Client quotas through real sockets and real clients: AlterClientQuotas/DescribeClientQuotas with
Kafka's semantics and `gregor quotas`, throttle_time_ms seen by librdkafka, the muted connection
(KIP-219), the fetch quota, request_percentage, controller_mutation_rate (KIP-599), and quotas
surviving a restart. One broker for the module (quota windows of 2 x 1 s, so effects show quickly);
each test uses client-ids of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from gregor.cli import main as gregor_main
from gregor.protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.security.quota_client import alter, as_dict, connect, describe, entity, request

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


@pytest.fixture(scope="module")
def qbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quota-broker"), {"quota.window.num": "2"}).start()
    yield b
    b.kill()


def test_alter_and_describe_round_trip_with_defaults(qbroker: BrokerProcess) -> None:
    bs = qbroker.bootstrap
    results = alter(bs, [
        (entity(user="rt-alice"), {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0}),
        (entity(user="rt-alice", client="rt-app"), {"request_percentage": 50.0}),
        (entity(user=None), {"producer_byte_rate": 3000.0}),
        (entity(client="rt-app"), {"controller_mutation_rate": 2.5}),
        (entity(user=None, client=None), {"consumer_byte_rate": 4000.0}),
    ])
    assert [r.error_code for r in results] == [0] * 5
    assert [(e.entity_type, e.entity_name) for e in results[3].entity] == [("client-id", "rt-app")]
    got = as_dict(describe(bs, [("user", EXACT, "rt-alice")]))
    assert got == {(("user", "rt-alice"),): {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0},
                   (("user", "rt-alice"), ("client-id", "rt-app")): {"request_percentage": 50.0}}
    assert list(as_dict(describe(bs, [("user", EXACT, "rt-alice")], strict=True))) == [(("user", "rt-alice"),)]
    assert as_dict(describe(bs, [("user", DEFAULT, None)], strict=True)) == {
        (("user", None),): {"producer_byte_rate": 3000.0}}
    both = as_dict(describe(bs, [("user", DEFAULT, None), ("client-id", DEFAULT, None)], strict=True))
    assert both == {(("user", None), ("client-id", None)): {"consumer_byte_rate": 4000.0}}
    specified = as_dict(describe(bs, [("client-id", SPECIFIED, None)], strict=True, version=0))
    assert (("client-id", "rt-app"),) in specified
    assert all(len(k) == 1 and k[0][0] == "client-id" for k in specified)
    # Removing one key keeps the others; removing the last removes the entity.
    assert alter(bs, [(entity(user="rt-alice"), {"producer_byte_rate": None})])[0].error_code == 0
    assert as_dict(describe(bs, [("user", EXACT, "rt-alice")], strict=True)) == {
        (("user", "rt-alice"),): {"consumer_byte_rate": 2000.0}}
    alter(bs, [(entity(user="rt-alice"), {"consumer_byte_rate": None}),
               (entity(user="rt-alice", client="rt-app"), {"request_percentage": None}),
               (entity(user=None), {"producer_byte_rate": None}),
               (entity(client="rt-app"), {"controller_mutation_rate": None}),
               (entity(user=None, client=None), {"consumer_byte_rate": None})])
    assert as_dict(describe(bs, [("user", EXACT, "rt-alice")])) == {}


def test_alter_errors_are_per_entity_and_validate_only_writes_nothing(qbroker: BrokerProcess) -> None:
    bs = qbroker.bootstrap
    results = alter(bs, [
        (entity(client="bad-1"), {"no_such_quota": 1.0}),
        (entity(client="bad-2"), {"request_percentage": 0.0}),
        (entity(client="bad-3"), {"producer_byte_rate": 1.5}),
        (entity(client="good-1"), {"producer_byte_rate": 1024.0}),
        ([{"entity_type": "ip", "entity_name": "1.2.3.4"}], {"producer_byte_rate": 1.0}),
        ([{"entity_type": "user", "entity_name": "x"}, {"entity_type": "user", "entity_name": "y"}],
         {"producer_byte_rate": 1.0}),
        (entity(client=""), {"producer_byte_rate": 1.0}),
        (entity(user="u", client=""), {"producer_byte_rate": 1.0}),
        (entity(client="good-1"), {"producer_byte_rate": 5.0, "request_percentage": None, "producer_byte_rate ": 1.0}),
    ])
    assert [r.error_code for r in results] == [ErrorCode.INVALID_REQUEST] * 3 + [0] + [ErrorCode.INVALID_REQUEST] * 5
    assert "no_such_quota" in results[0].error_message
    assert "positive" in results[1].error_message
    assert as_dict(describe(bs, [("client-id", SPECIFIED, None)], strict=True)) == {
        (("client-id", "good-1"),): {"producer_byte_rate": 1024.0}}  # the bad entry for it changed nothing
    # Names that are not plain words are stored and described as given.
    odd = "a/b c<default>%"
    assert alter(bs, [(entity(user=odd), {"consumer_byte_rate": 7.0})])[0].error_code == 0
    assert as_dict(describe(bs, [("user", EXACT, odd)], strict=True)) == {(("user", odd),): {"consumer_byte_rate": 7.0}}
    alter(bs, [(entity(user=odd), {"consumer_byte_rate": None})])
    assert alter(bs, [(entity(client="vo"), {"producer_byte_rate": 5.0})], validate_only=True)[0].error_code == 0
    assert as_dict(describe(bs, [("client-id", EXACT, "vo")])) == {}
    alter(bs, [(entity(client="good-1"), {"producer_byte_rate": None})])


def test_describe_filter_errors(qbroker: BrokerProcess) -> None:
    bs = qbroker.bootstrap
    dup = describe(bs, [("user", EXACT, "a"), ("user", DEFAULT, None)])
    assert dup.error_code == ErrorCode.INVALID_REQUEST and dup.entries is None
    assert describe(bs, [("user", EXACT, None)]).error_code == ErrorCode.INVALID_REQUEST
    assert describe(bs, [("user", DEFAULT, "x")]).error_code == ErrorCode.INVALID_REQUEST
    assert describe(bs, [("ip", SPECIFIED, None), ("user", SPECIFIED, None)]).error_code == ErrorCode.INVALID_REQUEST


def test_cli_alter_describe_delete(qbroker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    bs = qbroker.bootstrap
    base = ["quotas", "--bootstrap-server", bs]
    assert gregor_main(base + ["--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                               "--entity-type", "users", "--entity-name", "cli-alice",
                               "--entity-type", "clients", "--entity-name", "cli-app"]) == 0
    assert gregor_main(base + ["--alter", "--add-config", "request_percentage=25",
                               "--entity-type", "clients", "--entity-default"]) == 0
    out = capsys.readouterr().out
    assert "Completed updating config for user-principal 'cli-alice', client-id 'cli-app'." in out
    assert gregor_main(base + ["--describe", "--entity-type", "users", "--entity-name", "cli-alice",
                               "--entity-type", "clients", "--entity-name", "cli-app"]) == 0
    assert gregor_main(base + ["--describe", "--entity-type", "clients", "--entity-default"]) == 0
    out = capsys.readouterr().out
    assert ("Quota configs for user-principal 'cli-alice', client-id 'cli-app' are "
            "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0") in out
    assert "Quota configs for the default client-id are request_percentage=25.0" in out
    assert gregor_main(base + ["--alter", "--delete-config", "producer_byte_rate,consumer_byte_rate",
                               "--entity-type", "users", "--entity-name", "cli-alice",
                               "--entity-type", "clients", "--entity-name", "cli-app"]) == 0
    assert gregor_main(base + ["--alter", "--delete-config", "request_percentage",
                               "--entity-type", "clients", "--entity-default"]) == 0
    capsys.readouterr()
    assert gregor_main(base + ["--describe"]) == 0
    assert "cli-" not in capsys.readouterr().out and "default client-id" not in capsys.readouterr().out
    assert gregor_main(base + ["--alter", "--add-config", "bogus=1", "--entity-type", "users",
                               "--entity-name", "x"]) == 2
    assert gregor_main(base + ["--alter", "--add-config", "request_percentage=0", "--entity-type", "users",
                               "--entity-name", "x"]) == 1
    assert "INVALID_REQUEST" in capsys.readouterr().err


def test_producer_throttled_and_told(qbroker: BrokerProcess) -> None:
    """librdkafka sees throttle_time_ms (its throttle_cb), and the limited producer is slowed."""
    bs = qbroker.bootstrap
    alter(bs, [(entity(client="throttled-producer"), {"producer_byte_rate": 50_000.0})])
    throttles: list[float] = []
    p = Producer({"bootstrap.servers": bs, "client.id": "throttled-producer", "linger.ms": 5,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    value = b"t" * 10_000
    for _ in range(40):  # 400 kB: far past 50 kB/s over the 2 s window, answered at once (KIP-219)
        p.produce("quota-throttled", value)
    assert p.flush(30) == 0
    p.poll(0.2)
    assert throttles and max(throttles) == 2.0  # seconds: (400k / 1 s - 50k) / 50k x 1 s, capped at the 2 s window
    t0 = time.monotonic()
    p.produce("quota-throttled", b"next")  # waits out the throttle: the client backs off, the broker mutes
    assert p.flush(30) == 0
    assert time.monotonic() - t0 >= 1.5
    alter(bs, [(entity(client="throttled-producer"), {"producer_byte_rate": None})])


def test_fetch_quota_is_honoured(qbroker: BrokerProcess) -> None:
    bs = qbroker.bootstrap
    topic = "quota-fetch"
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 20_000})  # batches well under the quota
    value = b"f" * 10_000
    for _ in range(150):  # 1.5 MB
        p.produce(topic, value)
    assert p.flush(30) == 0
    alter(bs, [(entity(client="slow-consumer"), {"consumer_byte_rate": 500_000.0})])

    def consume_all(client_id: str) -> tuple[float, list[float]]:
        throttles: list[float] = []
        c = Consumer({"bootstrap.servers": bs, "group.id": f"g-{client_id}", "client.id": client_id,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = 0
        t0 = time.monotonic()
        while got < 150 and time.monotonic() < t0 + 60:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        elapsed = time.monotonic() - t0
        c.close()
        assert got == 150
        return elapsed, throttles

    fast, _ = consume_all("fast-consumer")
    slow, throttles = consume_all("slow-consumer")
    # 1.5 MB at 0.5 MB/s, less the first window's allowance (1 s): 2 s at least, well above the unlimited run.
    print(f"fetch: {slow:.2f} s at 0.5 MB/s, {fast:.2f} s unlimited, throttles {throttles}")
    assert slow >= 1.8 and slow > 2 * fast, (slow, fast)
    assert throttles and max(throttles) > 0
    alter(bs, [(entity(client="slow-consumer"), {"consumer_byte_rate": None})])


def _metadata_v8(conn: Any) -> Any:
    from gregor.protocol import apis
    return conn.request(apis.BY_KEY[3], 8, {"topics": [], "allow_auto_topic_creation": False})


def test_request_percentage_throttles_and_mutes(qbroker: BrokerProcess) -> None:
    bs = qbroker.bootstrap
    alter(bs, [(entity(client="gregor-admin"), {"request_percentage": 0.01})])  # our raw client's client-id
    conn = connect(bs)
    try:
        throttle_ms = 0
        for _ in range(5000):  # 0.01% of a thread over (at least) 1 s is 0.1 ms of handling
            throttle_ms = _metadata_v8(conn).throttle_time_ms
            if throttle_ms >= 100:  # long enough to time against the round trip
                break
        assert throttle_ms >= 100
        t0 = time.monotonic()
        _metadata_v8(conn)  # the connection is muted: not answered before the throttle time
        assert time.monotonic() - t0 >= throttle_ms / 1000 * 0.8
        # ApiVersions is exempt.
        from gregor.protocol import apis
        assert conn.request(apis.BY_KEY[18], 3, {"client_software_name": "t", "client_software_version": "1"}
                            ).throttle_time_ms == 0
    finally:
        conn.close()
        alter(bs, [(entity(client="gregor-admin"), {"request_percentage": None})])


def _create_topics(bs: str, names: list[str], version: int) -> Any:
    body = {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                       for n in names], "timeout_ms": 10_000, "validate_only": False}
    return request(bs, 19, version, body)


def test_controller_mutation_rate(qbroker: BrokerProcess) -> None:
    """KIP-599: at 1 partition/s (burst 11 with the default 11 x 1 s window) a burst of 20 topics
    has the excess refused with THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+), and an old client is
    throttled instead."""
    bs = qbroker.bootstrap
    alter(bs, [(entity(client="gregor-admin"), {"controller_mutation_rate": 1.0})])
    try:
        resp = _create_topics(bs, [f"mut-{i}" for i in range(20)], 7)
        codes = [t.error_code for t in resp.topics]
        assert codes.count(ErrorCode.THROTTLING_QUOTA_EXCEEDED) >= 5 and codes.count(0) >= 10, codes
        assert codes == sorted(codes, key=lambda c: c != 0)  # accepted first, refused after
        refused = next(t for t in resp.topics if t.error_code)
        assert refused.error_message == "The throttling quota has been exceeded."
        assert resp.throttle_time_ms > 0
        old = _create_topics(bs, [f"mut-old-{i}" for i in range(3)], 5)
        assert [t.error_code for t in old.topics] == [0, 0, 0] and old.throttle_time_ms > 0
    finally:
        time.sleep(0.2)
        alter(bs, [(entity(client="gregor-admin"), {"controller_mutation_rate": None})])


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "restart").start()
    try:
        alter(b.bootstrap, [(entity(user="persist-u", client="persist-c"), {"producer_byte_rate": 777.0}),
                            (entity(client=None), {"consumer_byte_rate": 888.0})])
        b.stop()
        b.restart()
        got = as_dict(describe(b.bootstrap, []))
        assert got == {(("user", "persist-u"), ("client-id", "persist-c")): {"producer_byte_rate": 777.0},
                       (("client-id", None),): {"consumer_byte_rate": 888.0}}
    finally:
        b.kill()


def test_quotas_reach_every_broker_on_zookeeper(start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    """Stored in ZooKeeper (/config/clients/..., with a change notification): set through one broker,
    described and enforced by the other within a second."""
    b0, b1 = (start_broker({"zookeeper.connect": zk_connect, "broker.id": str(i)}) for i in range(2))
    alter(b0.bootstrap, [(entity(client="zk-client"), {"producer_byte_rate": 12345.0})])
    deadline = time.monotonic() + 5
    while as_dict(describe(b1.bootstrap, [("client-id", EXACT, "zk-client")])) != {
            (("client-id", "zk-client"),): {"producer_byte_rate": 12345.0}}:
        assert time.monotonic() < deadline, "the quota did not reach the other broker"
        time.sleep(0.05)
    b1.stop()
    b1.restart()
    assert as_dict(describe(b1.bootstrap, [("client-id", EXACT, "zk-client")])) == {
        (("client-id", "zk-client"),): {"producer_byte_rate": 12345.0}}


def test_kafka_python_alter_and_describe(qbroker: BrokerProcess) -> None:
    """kafka-python (its messages built from Kafka's own schemas) alters and describes: its
    KafkaAdminClient has no client quota methods, so its request classes go through its connection
    manager."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    admin = KafkaAdminClient(bootstrap_servers=qbroker.bootstrap)
    try:
        def send(req: Any) -> Any:
            return admin._manager.run(admin._manager.send, req)

        resp = send(AlterClientQuotasRequest(
            entries=[([("user", "kp-user"), ("client-id", None)], [("producer_byte_rate", 2048.0, False)])],
            validate_only=False))
        assert [e.error_code for e in resp.entries] == [0]
        resp = send(DescribeClientQuotasRequest(components=[("user", EXACT, "kp-user")], strict=False))
        assert resp.error_code == 0
        assert [([(x.entity_type, x.entity_name) for x in e.entity], [(v.key, v.value) for v in e.values])
                for e in resp.entries] == [([("user", "kp-user"), ("client-id", None)], [("producer_byte_rate", 2048.0)])]
        send(AlterClientQuotasRequest(
            entries=[([("user", "kp-user"), ("client-id", None)], [("producer_byte_rate", 0.0, True)])],
            validate_only=False))
    finally:
        admin.close()
