"""Kafka's access-control model, sans-IO: resource patterns, access control entries, bindings, filters.

The enums carry Kafka's wire codes (CreateAcls/DescribeAcls/DeleteAcls send them as INT8) and Kafka's
names (ZooKeeper's /kafka-acl znodes store "Topic", "Allow", "Read", "DescribeConfigs"), so ACLs written
by Kafka's tools and read by Gregor (or the reverse) mean the same thing.

Matching follows Kafka's ResourcePatternFilter / AccessControlEntryFilter exactly (filters are what
DescribeAcls and DeleteAcls send); authorization itself (which ACLs apply to one request, implied
operations, DENY winning, super users) is `AclIndex.authorize`, kept here so it is unit-testable.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

WILDCARD_RESOURCE = "*"  # a LITERAL resource named "*" matches every resource of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # Kafka's one CLUSTER resource


class _Named(enum.IntEnum):
    """An enum with Kafka's wire code and Kafka's CamelCase name (as in ZooKeeper's JSON)."""

    @property
    def kafka_name(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> _Named:
        """From Kafka's CamelCase name or the upper-case enum name, any case; UNKNOWN if neither."""
        key = text.replace("_", "").replace("-", "").upper()
        for m in cls:
            if m.name.replace("_", "") == key:
                return m
        return cls(0) if 0 in cls._value2member_map_ else cls(1)


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these operations also allows the key (Kafka's AclAuthorizer): READ, WRITE, DELETE and
# ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies everything. DENY is never implied:
# a DENY of READ does not deny DESCRIBE.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALL}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                              AclOperation.ALL}),
}

# The operations KIP-430 reports per resource type (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
# KIP-430: the authorized-operations field when the client did not ask for it.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource an ACL is attached to: LITERAL (the name, or "*" for all) or PREFIXED (names starting with it)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", or "User:*" for every principal
    host: str  # a client address, or "*"
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> dict[str, str]:
        """Kafka's /kafka-acl znode entry."""
        return {"principal": self.principal, "permissionType": self.permission_type.kafka_name,
                "operation": self.operation.kafka_name, "host": self.host}

    @classmethod
    def from_json(cls, d: Mapping[str, str]) -> AccessControlEntry:
        return cls(str(d["principal"]), str(d.get("host", WILDCARD_HOST)),
                   AclOperation(AclOperation.parse(str(d["operation"]))),
                   AclPermissionType(AclPermissionType.parse(str(d["permissionType"]))))


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType
    name: str | None  # None matches any name
    pattern_type: PatternType

    def matches(self, p: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches: MATCH finds every pattern that applies to the named resource
        (the literal name, the literal "*", prefixes of it); ANY every pattern with exactly that name."""
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != p.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        if p.pattern_type == PatternType.LITERAL:
            return self.name == p.name or p.name == WILDCARD_RESOURCE
        if p.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(p.name)
        return False

    def indefinite_field(self) -> str | None:
        """Why this filter is invalid (UNKNOWN fields), or None (Kafka's findIndefiniteField for filters)."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches(self, e: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation == AclOperation.ANY or self.operation == e.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == e.permission_type))

    def indefinite_field(self) -> str | None:
        if self.operation == AclOperation.UNKNOWN:
            return "Operation is UNKNOWN."
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, b: AclBinding) -> bool:
        return self.pattern.matches(b.pattern) and self.entry.matches(b.entry)

    def indefinite_field(self) -> str | None:
        return self.pattern.indefinite_field() or self.entry.indefinite_field()


def validate_binding(b: AclBinding) -> str | None:
    """Why CreateAcls must refuse this binding (Kafka's messages), or None when it can be stored."""
    p, e = b.pattern, b.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or \
            p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED) or \
            e.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or \
            e.permission_type in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        return "Invalid ACL creation request: ACL binding contains unknown or matching-only elements"
    if not p.name:
        return "Invalid empty resource name specified"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if "/" in p.name and p.resource_type != ResourceType.TOPIC:  # a znode name: one path segment
        return f"Resource name {p.name!r} must not contain '/'"
    principal_type, sep, principal_name = e.principal.partition(":")
    if not sep or not principal_type or not principal_name:
        return f"Could not parse principal from `{e.principal}` (no colon is present separating the principal " \
               "type from the principal name)"
    if e.operation not in SUPPORTED_OPERATIONS.get(p.resource_type, ()) and e.operation != AclOperation.ALL:
        return f"ACL binding for {p.resource_type.name} does not support operation {e.operation.name}"
    return None


class AclIndex:
    """Every ACL, indexed for authorization: literal patterns by (type, name), prefixed ones by type then
    name; `authorize` collects the ACLs that apply to one resource with a few dict lookups plus one per
    prefix length present (prefixed patterns are rare, and only their distinct lengths are tried)."""

    def __init__(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]] = {}) -> None:  # noqa: B006
        self._by_pattern: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        for p, entries in acls.items():
            self.set(p, entries)

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Start again from `acls` (a metadata image loaded whole)."""
        self._by_pattern.clear()
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        for p, entries in acls.items():
            self.set(p, entries)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_pattern.values())

    def set(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the ACLs of one pattern (empty: remove it)."""
        fs = frozenset(entries)
        if pattern.pattern_type == PatternType.PREFIXED:
            by_name = self._prefixed.setdefault(pattern.resource_type, {})
            if fs:
                by_name[pattern.name] = fs
            else:
                by_name.pop(pattern.name, None)
            self._prefix_lengths[pattern.resource_type] = sorted({len(n) for n in by_name})
        elif fs:
            self._literal[(pattern.resource_type, pattern.name)] = fs
        else:
            self._literal.pop((pattern.resource_type, pattern.name), None)
        if fs:
            self._by_pattern[pattern] = fs
        else:
            self._by_pattern.pop(pattern, None)

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._by_pattern.get(pattern, frozenset())

    def patterns(self) -> Mapping[ResourcePattern, frozenset[AccessControlEntry]]:
        return self._by_pattern

    def bindings(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        out = []
        for p, entries in self._by_pattern.items():
            if flt is not None and not flt.pattern.matches(p):
                continue
            out.extend(AclBinding(p, e) for e in entries if flt is None or flt.entry.matches(e))
        return out

    def matching(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """The ACL sets that apply to one resource: its literal name, the literal "*", and each prefix."""
        out = []
        lit = self._literal
        e = lit.get((resource_type, name))
        if e:
            out.append(e)
        e = lit.get((resource_type, WILDCARD_RESOURCE))
        if e and name != WILDCARD_RESOURCE:
            out.append(e)
        by_name = self._prefixed.get(resource_type)
        if by_name:
            for n in self._prefix_lengths[resource_type]:
                if n > len(name):
                    break
                e = by_name.get(name[:n])
                if e:
                    out.append(e)
        return out

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str, allow_if_no_acl: bool) -> bool:
        """Kafka's rule: no ACL on the resource -> `allow_if_no_acl`; a matching DENY (the operation or ALL)
        refuses; otherwise a matching ALLOW of the operation or one implying it allows."""
        sets = self.matching(resource_type, name)
        if not sets:
            return allow_if_no_acl
        allow_ops = IMPLIED_BY.get(operation, frozenset({operation, AclOperation.ALL}))
        allowed = False
        for entries in sets:
            for e in entries:
                if e.principal != principal and e.principal != WILDCARD_PRINCIPAL:
                    continue
                if e.host != host and e.host != WILDCARD_HOST:
                    continue
                if e.permission_type == AclPermissionType.DENY:
                    if e.operation == operation or e.operation == AclOperation.ALL:
                        return False
                elif e.operation in allow_ops:
                    allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                      allow_if_no_acl: bool) -> bool:
        """Kafka's authorizeByResourceType: may the principal do `operation` on SOME resource of the type?
        True when an ALLOW pattern for it is not covered by a DENY (a literal "*" DENY covers everything, a
        DENY prefix covers the names and prefixes starting with it)."""

        def applies(e: AccessControlEntry) -> bool:
            return (e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD_HOST))

        deny_lit: set[str] = set()
        deny_pre: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        any_acl = False
        allow_ops = IMPLIED_BY.get(operation, frozenset({operation, AclOperation.ALL}))
        for p, entries in self._by_pattern.items():
            if p.resource_type != resource_type:
                continue
            any_acl = True
            for e in entries:
                if not applies(e):
                    continue
                if e.permission_type == AclPermissionType.DENY and e.operation in (operation, AclOperation.ALL):
                    (deny_pre if p.pattern_type == PatternType.PREFIXED else deny_lit).add(p.name)
                elif e.permission_type == AclPermissionType.ALLOW and e.operation in allow_ops:
                    allow.append((p.pattern_type, p.name))
        if WILDCARD_RESOURCE in deny_lit:
            return False
        if not any_acl:
            return allow_if_no_acl
        for pt, name in allow:
            if any(name.startswith(d) for d in deny_pre):
                continue
            if pt == PatternType.LITERAL and name in deny_lit:
                continue
            return True
        return False


def authorized_operations(index: AclIndex, principal: str, host: str, resource_type: ResourceType, name: str,
                          allow_if_no_acl: bool, super_user: bool) -> int:
    """KIP-430's bitfield: bit `op` set for each supported operation the principal may perform."""
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        if super_user or index.authorize(principal, host, op, resource_type, name, allow_if_no_acl):
            bits |= 1 << op
    return bits


def acls_to_json(pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> dict[str, object]:
    """One pattern's ACLs as a JSON document (the embedded store's journal and snapshot)."""
    return {"resourceType": pattern.resource_type.kafka_name, "patternType": pattern.pattern_type.name,
            "name": pattern.name, "acls": sorted((e.to_json() for e in entries), key=lambda d: sorted(d.items()))}


def acls_from_json(d: Mapping[str, object]) -> tuple[ResourcePattern, frozenset[AccessControlEntry]]:
    pattern = ResourcePattern(ResourceType(ResourceType.parse(str(d["resourceType"]))), str(d["name"]),
                              PatternType(PatternType.parse(str(d["patternType"]))))
    rows = d.get("acls") or []
    assert isinstance(rows, list)
    return pattern, frozenset(AccessControlEntry.from_json(r) for r in rows)
