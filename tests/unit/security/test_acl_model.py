"""Kafka's ACL model, sans-IO: filter matching, implied operations, DENY winning, super users, the cache."""

from __future__ import annotations

from gregor.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_binding,
)
from gregor.security.authorizer import AclAuthorizer, create_authorizer, parse_super_users

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def ace(principal: str, op: AclOperation, perm: AclPermissionType = ALLOW, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def test_wire_codes_and_kafka_names() -> None:
    assert (ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID, ResourceType.USER) == (2, 5, 7)
    assert (PatternType.MATCH, PatternType.PREFIXED) == (2, 4)
    assert (AclOperation.DESCRIBE_CONFIGS, AclOperation.IDEMPOTENT_WRITE) == (10, 12)
    assert AclOperation.DESCRIBE_CONFIGS.kafka_name == "DescribeConfigs"
    assert ResourceType.TRANSACTIONAL_ID.kafka_name == "TransactionalId"
    assert AclOperation.parse("IdempotentWrite") == AclOperation.IDEMPOTENT_WRITE
    assert AclOperation.parse("cluster_action") == AclOperation.CLUSTER_ACTION
    assert AclOperation.parse("nonsense") == AclOperation.UNKNOWN
    e = ace("User:alice", AclOperation.READ)
    assert e.to_json() == {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
    assert AccessControlEntry.from_json(e.to_json()) == e


def test_pattern_filter_matching_as_kafka() -> None:
    lit = ResourcePattern(T, "orders", LIT)
    star = ResourcePattern(T, "*", LIT)
    pre = ResourcePattern(T, "ord", PRE)
    match = ResourcePatternFilter(T, "orders", PatternType.MATCH)
    assert match.matches(lit) and match.matches(star) and match.matches(pre)
    assert not match.matches(ResourcePattern(T, "x", PRE))
    anyf = ResourcePatternFilter(T, "orders", PatternType.ANY)
    assert anyf.matches(lit) and not anyf.matches(star) and not anyf.matches(pre)
    assert ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY).matches(pre)
    assert not ResourcePatternFilter(G, None, PatternType.ANY).matches(pre)
    assert ResourcePatternFilter(T, "ord", PRE).matches(pre) and not ResourcePatternFilter(T, "ord", LIT).matches(pre)
    assert ResourcePatternFilter(ResourceType.UNKNOWN, None, PatternType.ANY).indefinite_field()
    f = AclBindingFilter(ResourcePatternFilter(T, None, PatternType.ANY),
                         AccessControlEntryFilter("User:alice", None, AclOperation.ANY, AclPermissionType.ANY))
    assert f.matches(AclBinding(lit, ace("User:alice", AclOperation.READ)))
    assert not f.matches(AclBinding(lit, ace("User:bob", AclOperation.READ)))


def test_validate_binding() -> None:
    ok = AclBinding(ResourcePattern(T, "t", LIT), ace("User:a", AclOperation.READ))
    assert validate_binding(ok) is None
    assert validate_binding(AclBinding(ResourcePattern(T, "t", PatternType.MATCH), ok.entry))
    assert validate_binding(AclBinding(ResourcePattern(T, "", LIT), ok.entry))
    assert validate_binding(AclBinding(ResourcePattern(C, "other", LIT), ace("User:a", AclOperation.ALTER)))
    assert validate_binding(AclBinding(ok.pattern, ace("alice", AclOperation.READ)))
    assert validate_binding(AclBinding(ok.pattern, ace("User:a", AclOperation.ANY)))


def test_authorize_literal_prefixed_wildcards_implied_and_deny() -> None:
    idx = AclIndex({
        ResourcePattern(T, "orders-", PRE): [ace("User:alice", AclOperation.READ)],
        ResourcePattern(T, "orders-eu", LIT): [ace("User:alice", AclOperation.READ, DENY)],
        ResourcePattern(T, "*", LIT): [ace("User:*", AclOperation.DESCRIBE, host="10.0.0.1")],
        ResourcePattern(G, "g1", LIT): [ace("User:alice", AclOperation.ALL)],
    })
    a = idx.authorize
    assert a("User:alice", "1.2.3.4", AclOperation.READ, T, "orders-us", False)
    assert a("User:alice", "1.2.3.4", AclOperation.DESCRIBE, T, "orders-us", False)  # READ implies DESCRIBE
    assert not a("User:alice", "1.2.3.4", AclOperation.WRITE, T, "orders-us", False)
    assert not a("User:alice", "1.2.3.4", AclOperation.READ, T, "orders-eu", False)  # DENY wins
    assert a("User:alice", "1.2.3.4", AclOperation.DESCRIBE, T, "orders-eu", False)  # a DENY is not implied
    assert not a("User:alice", "1.2.3.4", AclOperation.READ, T, "payments", False)
    assert a("User:bob", "10.0.0.1", AclOperation.DESCRIBE, T, "payments", False)  # wildcard name and principal
    assert not a("User:bob", "10.0.0.2", AclOperation.DESCRIBE, T, "payments", False)
    assert a("User:alice", "h", AclOperation.DELETE, G, "g1", False)  # ALL
    assert not a("User:alice", "h", AclOperation.READ, G, "g2", False)
    assert a("User:alice", "h", AclOperation.READ, G, "g2", True)  # no ACL: allow.everyone.if.no.acl.found
    assert idx.authorize_any("User:alice", "h", AclOperation.READ, T, False)
    assert not idx.authorize_any("User:bob", "h", AclOperation.WRITE, T, False)
    idx.set(ResourcePattern(T, "orders-", PRE), [])
    assert not a("User:alice", "1.2.3.4", AclOperation.READ, T, "orders-us", False)
    assert len(idx) == 3


def test_authorizer_super_users_cache_and_class_names() -> None:
    assert parse_super_users("User:admin; User:broker") == {"User:admin", "User:broker"}
    assert create_authorizer("", None, False) is None
    z = create_authorizer("kafka.security.authorizer.AclAuthorizer", "User:admin", False)
    assert z is not None and create_authorizer("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "", True)
    assert z.authorize("User:admin", "h", AclOperation.ALTER, C, "kafka-cluster")
    assert not z.authorize("User:bob", "h", AclOperation.READ, T, "t")
    z.on_acls(ResourcePattern(T, "t", LIT), [ace("User:bob", AclOperation.READ)])
    assert z.authorize("User:bob", "h", AclOperation.READ, T, "t")  # the cached refusal was dropped
    assert z.authorized_operations("User:bob", "h", T, "t") == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
    try:
        create_authorizer("com.example.Other", None, False)
        raise AssertionError("accepted an unknown class")
    except ValueError:
        pass
    assert isinstance(z, AclAuthorizer)
