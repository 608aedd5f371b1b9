"""The broker's authorizer: Kafka's AclAuthorizer / StandardAuthorizer behaviour over the cached ACLs.

`authorizer.class.name` selects it under the class names Kafka operators already write (empty: no
authorization, every request allowed, as before). `super.users` (`User:admin;User:broker`) are allowed
everything; `allow.everyone.if.no.acl.found` decides for a resource no ACL mentions.

The ACLs are the metadata cache's (every change arrives as an ACLS event, from the embedded store or
ZooKeeper's change notifications); `on_acls` keeps an `AclIndex` and drops the decision cache. A check
on the hot path (Produce and Fetch, once per topic) is then one dict lookup in the decision cache,
keyed by (principal, host, operation, resource type, name); a miss costs the index's few lookups.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from gregor.configdef import ConfigError
from gregor.security.acl import (
    AccessControlEntry,
    AclIndex,
    AclOperation,
    ResourcePattern,
    ResourceType,
    authorized_operations,
)

log = logging.getLogger("gregor.authorizer")

# Metadata event kinds (gregor.metadata.store's ACLS and SESSION), by value: this module stays below the store.
ACLS, SESSION = "acls", "session"

# The class names accepted for authorizer.class.name: Kafka's ZooKeeper-mode and KRaft-mode authorizers
# (both implement the same ACL semantics) and our own.
AUTHORIZER_CLASS_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "gregor.security.authorizer.AclAuthorizer",
)
# Decisions kept before the cache is emptied and refilled: bounds memory against a client cycling through
# names (each distinct (principal, host, operation, resource) is one entry of ~200 bytes).
DECISION_CACHE_MAX_ENTRIES = 100_000


def parse_super_users(text: str | None) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by ';' (each `Type:name`)."""
    return frozenset(s.strip() for s in (text or "").split(";") if s.strip())


class AclAuthorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.index = AclIndex()
        self._decisions: dict[tuple[str, str, int, int, str], bool] = {}

    # --- ACLs (on the event loop, from the metadata cache) ------------------------------------
    def attach(self, index: AclIndex) -> None:
        """Decide from `index` (the metadata cache's, which applies every ACL change on the loop)."""
        self.index = index
        self._decisions.clear()

    def on_metadata_change(self, kind: str, _key: str) -> None:
        """A metadata cache listener: any ACL change (or a reload) invalidates the cached decisions."""
        if kind in (ACLS, SESSION):
            self._decisions.clear()

    def load(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        self.index = AclIndex(acls)
        self._decisions.clear()

    def on_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        self.index.set(pattern, entries)
        self._decisions.clear()

    # --- decisions ------------------------------------------------------------------------
    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        d = self._decisions.get(key)
        if d is not None:
            return d
        if principal in self.super_users:
            d = True
        else:
            d = self.index.authorize(principal, host, operation, resource_type, name, self.allow_if_no_acl)
            if not d:  # as Kafka's authorizer logger, at INFO; once per decision kept in the cache below
                log.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s",
                         principal, operation.name, host, resource_type.name, name)
        if len(self._decisions) >= DECISION_CACHE_MAX_ENTRIES:
            self._decisions.clear()
        self._decisions[key] = d
        return d

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal do `operation` on some resource of the type (Kafka's authorizeByResourceType)?"""
        if principal in self.super_users:
            return True
        return self.index.authorize_any(principal, host, operation, resource_type, self.allow_if_no_acl)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        return authorized_operations(self.index, principal, host, resource_type, name, self.allow_if_no_acl,
                                     principal in self.super_users)


def create_authorizer(class_name: str | None, super_users: str | None,
                      allow_everyone_if_no_acl_found: bool) -> AclAuthorizer | None:
    """The authorizer `authorizer.class.name` names, or None for none. Raises ConfigError for another class."""
    name = (class_name or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"authorizer.class.name {name!r} is not supported: use one of "
                         f"{', '.join(AUTHORIZER_CLASS_NAMES)}")
    return AclAuthorizer(parse_super_users(super_users), allow_everyone_if_no_acl_found)
