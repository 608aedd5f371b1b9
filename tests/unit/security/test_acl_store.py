"""ACLs in the embedded metadata store: journaled (a crash replays them), folded into the snapshot on close,
published as ACLS events, and held by the metadata cache's index."""

from __future__ import annotations

from pathlib import Path

from gregor.metadata.cache import MetadataCache
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import ACLS, AlterAcls, MetadataEvent
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

P = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
A = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
B = AccessControlEntry("User:bob", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY)


def test_acls_are_journaled_snapshotted_and_replayed(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    events: list[MetadataEvent] = []
    s._publish = events.append  # type: ignore[method-assign]  # events without a loop
    s.alter_acls(P, frozenset({A, B}))
    s.alter_acls(P, remove=frozenset({B}))
    assert [(e.kind, e.acl_pattern, e.acls) for e in events] == [(ACLS, P, frozenset({A, B})), (ACLS, P, frozenset({A}))]
    crashed = EmbeddedMetadataStore(str(tmp_path), 0)  # the first never closed: its journal is replayed
    assert crashed.snapshot().acls == {P: frozenset({A})}
    crashed.close()
    again = EmbeddedMetadataStore(str(tmp_path), 0)  # from the snapshot alone
    assert again.snapshot().acls == {P: frozenset({A})}
    assert again.apply([AlterAcls(P, remove=frozenset({A}))])[0] > 0
    assert again.snapshot().acls == {}
    again.close()


def test_the_cache_indexes_the_acls_it_is_given(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    s.alter_acls(P, frozenset({A}))
    cache = MetadataCache()
    cache.load(s.snapshot())
    assert cache.acls.authorize("User:alice", "h", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders-eu", False)
    seen: list[tuple[str, str]] = []
    cache.add_listener(lambda kind, key: seen.append((kind, key)))
    cache.apply(MetadataEvent(cache.version + 1, ACLS, acl_pattern=P, acls=frozenset()))
    assert not cache.acls.authorize("User:alice", "h", AclOperation.READ, ResourceType.TOPIC, "orders-eu", False)
    assert seen == [(ACLS, str(P))]
    s.close()
