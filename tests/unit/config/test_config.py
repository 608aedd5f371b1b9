"""The broker's table of properties (gregor.config.BROKER_PROPS): one definition each, ready for
dynamic broker configs: type, default within its own bounds, documentation, Kafka's update mode."""

from __future__ import annotations

from gregor.config import BROKER_PROPS, CLUSTER_WIDE, PER_BROKER, READ_ONLY, TOPIC_CONFIGS, BrokerConfig
from gregor.config.broker import _p
from gregor.configdef import MODES

# The last line of the table is left as it was so that the lines other slices append after it merge
# mechanically; it gets its documentation after that merge.
UNDOCUMENTED = {"offset.metadata.max.bytes"}


def test_every_broker_property_is_classified_and_documented() -> None:
    for name, prop in BROKER_PROPS.items():
        assert prop.mode in MODES and (prop.doc or name in UNDOCUMENTED), name
    # Kafka's classification of a few, including the topic configs' synonyms.
    assert BROKER_PROPS["listeners"].mode == PER_BROKER
    assert BROKER_PROPS["broker.id"].mode == READ_ONLY
    assert BROKER_PROPS["log.retention.ms"].mode == CLUSTER_WIDE
    assert BROKER_PROPS["log.retention.hours"].mode == READ_ONLY
    assert BROKER_PROPS["message.max.bytes"].mode == CLUSTER_WIDE
    assert BROKER_PROPS["log.cleaner.threads"].mode == CLUSTER_WIDE
    assert BROKER_PROPS["log.cleaner.enable"].mode == READ_ONLY


def test_topic_synonyms_are_listed_once() -> None:
    names = [s.name for t in TOPIC_CONFIGS.values() for s in t.synonyms]
    assert len(names) == len(set(names))
    assert set(names) <= set(BROKER_PROPS)


def test_p_keeps_its_signature() -> None:
    """Other slices add broker properties as `_p(name, type, default, lo=, hi=, choices=, doc=)` lines."""
    p = _p("x.y", "int", 5, 1, 10, None, "doc")
    assert (p.name, p.type, p.default, p.lo, p.hi, p.doc, p.mode) == ("x.y", "int", 5, 1, 10, "doc", READ_ONLY)
    q = _p("x.z", "string", "a", choices=("a", "b"), doc="d", mode=CLUSTER_WIDE)
    assert q.choices == ("a", "b") and q.mode == CLUSTER_WIDE


def test_defaults_parse() -> None:
    c = BrokerConfig()
    for name, prop in BROKER_PROPS.items():
        assert c.get(name) == prop.default, name
