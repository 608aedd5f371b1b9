"""The client quota rules on a fake clock: KIP-546 precedence, shared and per-entity rates,
Kafka's throttle time, the fetch window, KIP-599's token bucket, bounded sensors, describe filters."""

from __future__ import annotations

import pytest

from gregor.security.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaManager,
    QuotaSettings,
    entity_from_store,
    format_quota_value,
    sanitize,
    store_key,
    validate_quota_value,
)

ALL_LEVELS = {
    ("alice", "app"): "1",
    ("alice", DEFAULT): "2",
    ("alice", None): "3",
    (DEFAULT, "app"): "4",
    (DEFAULT, DEFAULT): "5",
    (DEFAULT, None): "6",
    (None, "app"): "7",
    (None, DEFAULT): "8",
}


def test_kip546_precedence_level_by_level() -> None:
    levels = dict(ALL_LEVELS)
    m = ClientQuotaManager()
    expected = 1
    while levels:
        m.load((e, {PRODUCER_BYTE_RATE: v}) for e, v in levels.items())
        got = m.resolve("alice", "app")[PRODUCER_BYTE_RATE]
        assert got is not None and got[0] == expected
        del levels[next(e for e, v in levels.items() if v == str(expected))]
        expected += 1
    m.load([])
    assert m.resolve("alice", "app")[PRODUCER_BYTE_RATE] is None and not m.enabled


def test_each_quota_type_resolves_on_its_own() -> None:
    m = ClientQuotaManager()
    m.load([(("alice", None), {CONSUMER_BYTE_RATE: "100"}), ((None, "app"), {PRODUCER_BYTE_RATE: "200"}),
            ((None, DEFAULT), {PRODUCER_BYTE_RATE: "300", "SCRAM-SHA-256": "salt=..."})])
    r = m.resolve("alice", "app")
    assert r[CONSUMER_BYTE_RATE] == (100.0, ("alice", ""))
    assert r[PRODUCER_BYTE_RATE] == (200.0, ("", "app"))
    assert r[REQUEST_PERCENTAGE] is None
    assert m.resolve("bob", "other")[PRODUCER_BYTE_RATE] == (300.0, ("", "other"))


def test_tags_share_or_separate_rates_like_kafka() -> None:
    m = ClientQuotaManager(QuotaSettings(window_num=11, window_size_s=1.0))
    m.load([((None, "app"), {PRODUCER_BYTE_RATE: "1000"}), ((DEFAULT, None), {CONSUMER_BYTE_RATE: "1000"})])
    # One client-id quota is shared by every user of that client-id.
    assert m.record_produce("alice", "app", 10_000, 0.0) == 0
    assert m.record_produce("bob", "app", 1, 0.0) > 0
    # The <default> user quota is each user's own.
    assert m.record_fetch("alice", "x", 10_001, 0.0) > 0
    assert m.record_fetch("bob", "y", 10_000, 0.0) == 0


def test_throttle_time_is_kafkas_formula_bounded_by_the_window() -> None:
    m = ClientQuotaManager(QuotaSettings(window_num=11, window_size_s=1.0))
    m.load([((None, "app"), {PRODUCER_BYTE_RATE: "1000"})])
    # 10 s window (samples - 1) at first: 10,000 bytes is exactly the quota.
    assert m.record_produce("u", "app", 10_000, 100.0) == 0
    # 15,000 over 10 s = 1,500 B/s: (1500 - 1000) / 1000 x 10 s = 5 s.
    assert m.record_produce("u", "app", 5_000, 100.0) == 5000
    assert m.record_produce("u", "app", 10**9, 100.0) == 11_000  # bounded by num x size
    # Other clients are not affected.
    assert m.record_produce("u", "other", 10**9, 100.0) == 0


def test_rate_returns_to_the_quota_after_the_throttle() -> None:
    m = ClientQuotaManager(QuotaSettings(window_num=3, window_size_s=1.0))
    m.load([((None, "app"), {PRODUCER_BYTE_RATE: "1000"})])
    t = 0.0
    sent = 0
    while t < 60.0:  # a client that always sends 500 bytes and honours each throttle
        sent += 500
        t += max(m.record_produce("u", "app", 500, t), 1) / 1000
    assert 900 <= sent / t <= 1100


def test_fetch_window_and_unrecord() -> None:
    m = ClientQuotaManager(QuotaSettings(window_num=11, window_size_s=2.0))
    assert m.fetch_window_bytes("u", "c") is None
    m.load([((None, DEFAULT), {CONSUMER_BYTE_RATE: "1000"})])
    assert m.fetch_window_bytes("u", "c") == 20_000  # (11 - 1) samples of 2 s
    assert m.record_fetch("u", "c", 30_000, 0.0) > 0
    m.unrecord_fetch("u", "c", 30_000, 0.0)
    assert m.record_fetch("u", "c", 1000, 0.0) == 0


def test_request_percentage() -> None:
    m = ClientQuotaManager(QuotaSettings(window_num=11, window_size_s=1.0))
    m.load([((None, "busy"), {REQUEST_PERCENTAGE: "10"})])
    # 10% of one thread over a 10 s window is 1 s of handling; 0.5 s is fine, 2 s is not.
    assert m.record_request_time("u", "busy", 500_000_000, 0.0) == 0
    assert m.record_request_time("u", "busy", 1_500_000_000, 0.0) == 10_000


def test_controller_mutation_token_bucket_strict_and_permissive() -> None:
    m = ClientQuotaManager(QuotaSettings(controller_window_num=10, controller_window_size_s=1.0))
    m.load([((None, "admin"), {CONTROLLER_MUTATION_RATE: "1"})])
    q = m.controller_mutation("u", "admin", strict=True, now=0.0)
    accepted = 0
    for _ in range(20):  # burst 10 partitions; the one that goes into debt is still accepted
        if q.exceeded():
            continue
        q.record(1)
        accepted += 1
    assert accepted == 11 and q.throttle_ms == 1000
    q = m.controller_mutation("u", "admin", strict=True, now=5.0)  # 5 tokens back, from -1
    assert not q.exceeded()
    q = m.controller_mutation("u", "admin", strict=False, now=5.0)
    q.record(10)
    assert q.throttle_ms == 6000 and not q.exceeded()
    assert not m.controller_mutation("u", "other", strict=True, now=5.0).exceeded()


def test_sensors_expire_and_are_bounded() -> None:
    m = ClientQuotaManager(QuotaSettings(sensor_expiration_s=3600.0, max_sensors=5))
    m.load([((None, DEFAULT), {PRODUCER_BYTE_RATE: "1000"})])
    for i in range(20):
        m.record_produce("u", f"c{i}", 1, 0.0)
    assert m.sensor_count() <= 5
    m.record_produce("u", "late", 1, 4000.0)  # the others idled past the expiration
    assert m.sensor_count() == 1
    m.record_produce("u", "late", 1, 7700.0)  # an existing sensor's record also sweeps (at most once a minute)
    m.record_produce("u", "later", 1, 7700.0)
    assert m.sensor_count() == 2


def test_describe_filters_like_kafka() -> None:
    m = ClientQuotaManager()
    m.load((e, {PRODUCER_BYTE_RATE: v}) for e, v in ALL_LEVELS.items())

    def names(exact: dict[str, str | None], any_of: list[str], strict: bool) -> set[tuple[str | None, str | None]]:
        return {e for e, _ in m.describe(exact, any_of, strict)}

    assert names({USER: "alice"}, [], False) == {("alice", "app"), ("alice", DEFAULT), ("alice", None)}
    assert names({USER: "alice"}, [], True) == {("alice", None)}
    assert names({USER: None}, [], True) == {(DEFAULT, None)}
    assert names({}, [CLIENT_ID], True) == {(None, "app"), (None, DEFAULT)}
    assert names({CLIENT_ID: "app"}, [USER], True) == {("alice", "app"), (DEFAULT, "app")}
    assert len(names({}, [], False)) == 8


def test_store_names_and_values() -> None:
    assert store_key(("alice", None)) == ("users", "alice")
    assert store_key(("alice", "app")) == ("users", "alice/clients/app")
    assert store_key((None, DEFAULT)) == ("clients", "<default>")
    for e in ALL_LEVELS:
        assert entity_from_store(*store_key(e)) == e
    assert sanitize("a/b c") == "a%2Fb%20c" and sanitize("<default>") != DEFAULT
    assert sanitize("alice@example.com*~é") == "alice%40example.com%2A%7E%C3%A9"  # as Kafka's Sanitizer
    assert validate_quota_value("producer_byte_rate", 1024.0) is None
    assert validate_quota_value("producer_byte_rate", 1.5) is not None
    assert validate_quota_value("request_percentage", 0.0) is not None
    assert validate_quota_value("request_percentage", 12.5) is None
    assert validate_quota_value("nope", 1.0) == "Invalid configuration key nope"
    assert format_quota_value("producer_byte_rate", 1048576.0) == "1048576"
    assert format_quota_value("request_percentage", 50.0) == "50.0"


@pytest.mark.parametrize("bad", [("users", ""), ("users", "a/clients/"), ("topics", "x"), ("clients", "a/b")])
def test_store_names_that_are_not_entities(bad: tuple[str, str]) -> None:
    assert entity_from_store(*bad) is None


def test_updates_follow_entity_config_events() -> None:
    m = ClientQuotaManager()
    assert not m.enabled and m.types == frozenset()
    m.update((None, "app"), {PRODUCER_BYTE_RATE: "1000", "SCRAM-SHA-256": "x"})
    assert m.enabled and m.types == {PRODUCER_BYTE_RATE}
    assert m.resolve("u", "app")[PRODUCER_BYTE_RATE] == (1000.0, ("", "app"))
    m.update((None, "app"), {PRODUCER_BYTE_RATE: "2000"})  # a changed bound is seen at once
    assert m.resolve("u", "app")[PRODUCER_BYTE_RATE] == (2000.0, ("", "app"))
    m.update((None, "app"), {"SCRAM-SHA-256": "x"})  # only non-quota configs left: no quota
    assert not m.enabled and m.resolve("u", "app")[PRODUCER_BYTE_RATE] is None
