"""Sizing changed at runtime, where Kafka changes it without a restart (issue 13): num.replica.fetchers
re-spreads a follower's partitions over more or fewer fetcher tasks while replication goes on; a
listener's own max.connections (listener.name.<l>.max.connections), static or dynamic, refuses new
connections on that listener only."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from tests.broker_process import BrokerProcess
from tests.wire import WireClient

StartBroker = Callable[..., BrokerProcess]


def _alter(bootstrap: str, entity: str, configs: dict[str, str | None]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of one BROKER entity ("" is the cluster default); None deletes. Retried while
    the connection is refused: a slot freed by a client's close counts once the broker has seen the close."""
    deadline = time.monotonic() + 5
    while True:
        c = WireClient(bootstrap)
        try:
            r = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": entity, "configs": [
                {"name": k, "config_operation": 1 if v is None else 0, "value": v} for k, v in configs.items()]}],
                "validate_only": False})
            return r.responses[0].error_code, r.responses[0].error_message
        except (OSError, EOFError):
            assert time.monotonic() < deadline, "the broker refused the admin connection"
            time.sleep(0.05)
        finally:
            c.close()


def _produce_everywhere(bootstrap: str, topic: str, partitions: int, tag: str) -> None:
    """One acks=all record to every partition: with min.insync.replicas=2 on two replicas, each is
    acknowledged only once the follower fetched it."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "message.timeout.ms": 10000})
    errors: list[object] = []
    for i in range(partitions):
        p.produce(topic, f"{tag}-{i}".encode(), partition=i, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(15) == 0
    assert errors == [None] * partitions, errors


def test_num_replica_fetchers_resized_without_restart(start_broker: StartBroker, zk_connect: str) -> None:
    """Two brokers: the cluster default num.replica.fetchers goes 1 -> 2 -> 4 -> 2; each follower moves
    partitions between fetchers and every partition keeps replicating (acks=all with min ISR 2). Kafka's
    rule refuses more than double or less than half the current count."""
    common = {"zookeeper.connect": zk_connect, "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100"}
    b0, b1 = (start_broker({**common, "broker.id": str(i)}) for i in range(2))
    admin = AdminClient({"bootstrap.servers": b0.bootstrap})
    # Broker 0 learns of broker 1 through its ZooKeeper watch: a replication factor of 2 needs both seen.
    deadline = time.monotonic() + 15
    while len(admin.list_topics(timeout=5).brokers) < 2:
        assert time.monotonic() < deadline, "broker 0 never saw broker 1"
        time.sleep(0.1)
    n = 8
    admin.create_topics([NewTopic("sized", n, 2, config={"min.insync.replicas": "2"})])["sized"].result(30)
    _produce_everywhere(b0.bootstrap, "sized", n, "before")
    moved = [0, 0]
    for count in ("2", "4", "2"):
        marks = [len(b0.log_lines), len(b1.log_lines)]
        assert _alter(b0.bootstrap, "", {"num.replica.fetchers": count}) == (0, None)
        resized = re.compile(rf"num.replica.fetchers={count}: (\d+) partitions moved, (\d+) fetchers now")
        for i, (b, mark) in enumerate(zip((b0, b1), marks, strict=True)):
            m = resized.search(b.wait_for_log(resized, since=mark))
            assert m is not None and 1 <= int(m.group(2)) <= int(count)
            moved[i] += int(m.group(1))
        _produce_everywhere(b0.bootstrap, "sized", n, f"at-{count}")
    assert all(moved), moved  # each follower moved partitions between fetchers, and they kept replicating
    e = admin.describe_configs([r := ConfigResource(ConfigResource.Type.BROKER, "1")])[r].result(30)["num.replica.fetchers"]
    assert (e.value, e.source, e.is_read_only) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
    code, msg = _alter(b0.bootstrap, "", {"num.replica.fetchers": "5"})
    assert code == KafkaError.INVALID_CONFIG and "double the current value 2" in (msg or ""), msg
    code, msg = _alter(b0.bootstrap, "0", {"background.threads": "4"})
    assert code == KafkaError.INVALID_CONFIG and "at least half the current value 10" in (msg or ""), msg


def _refused(bootstrap: str) -> bool:
    """Whether a new connection is closed at once instead of answered."""
    c = WireClient(bootstrap)
    try:
        c.send(18, 0, {})
        return c.closed_by_peer()
    finally:
        c.close()


def test_listener_max_connections(start_broker: StartBroker) -> None:
    """A static listener.name.extra.max.connections=1 holds EXTRA to one connection while PLAINTEXT serves
    more; raised dynamically per broker, EXTRA serves a second; set as the cluster default on PLAINTEXT,
    PLAINTEXT refuses past it; deleted, the limits are gone."""
    b = start_broker({"listeners": "PLAINTEXT://127.0.0.1:0,EXTRA://127.0.0.1:0",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT",
                      "listener.name.extra.max.connections": "1"})
    extra, plain = b.bootstrap_of("EXTRA"), b.bootstrap_of("PLAINTEXT")
    held = [WireClient(extra)]
    try:
        assert held[0].request(18, 0, {}).error_code == 0
        assert _refused(extra)
        held += [WireClient(plain), WireClient(plain)]
        assert all(c.request(18, 0, {}).error_code == 0 for c in held[1:])

        code, msg = _alter(plain, "0", {"listener.name.nosuch.max.connections": "2"})
        assert code == KafkaError.INVALID_CONFIG and "no listener NOSUCH" in (msg or ""), msg
        assert _alter(plain, "0", {"listener.name.extra.max.connections": "2"}) == (0, None)
        b.wait_for_log("listener connection limits: EXTRA=2")
        held.append(WireClient(extra))
        assert held[-1].request(18, 0, {}).error_code == 0
        assert _refused(extra)

        # A cluster-level listener config may be the cluster default (Kafka's ClusterLevelListenerConfigs):
        # PLAINTEXT holds 2 (held[1], held[2]) and refuses a third.
        assert _alter(plain, "", {"listener.name.plaintext.max.connections": "2"}) == (0, None)
        b.wait_for_log("listener connection limits: EXTRA=2, PLAINTEXT=2")
        assert _refused(plain)

        d = held[1].request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
                                    "include_synonyms": False, "include_documentation": False})
        assert [(e.name, e.value, e.config_source) for e in d.results[0].configs] == [
            ("listener.name.plaintext.max.connections", "2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
        held.pop(1).close()  # a PLAINTEXT slot for the admin request
        assert _alter(plain, "", {"listener.name.plaintext.max.connections": None}) == (0, None)
        b.wait_for_log(re.compile(r"listener connection limits: EXTRA=2$"))
        held += [WireClient(plain), WireClient(plain)]  # three on PLAINTEXT now
        assert all(c.request(18, 0, {}).error_code == 0 for c in held[-2:])
    finally:
        for c in held:
            c.close()
