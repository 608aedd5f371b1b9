"""The configs, ACLs and notifications part of the ZooKeeper watcher's image.

Dynamic broker configs (/config/brokers/<entity>, watched), user, client and group configs
(/config/users, /config/clients, /config/groups, found again through Kafka's /config/changes
notifications), ACLs (/kafka-acl..., found again through /kafka-acl-changes and
/kafka-acl-extended-changes) and log dir failure notifications (/log_dir_event_notification).
Each change is published as BROKER_CONFIGS, ENTITY_CONFIGS, ACLS or LOG_DIR_FAILURE, only when it
changed what the image holds.
"""

from __future__ import annotations

import json
import logging
import time

from kazoo.exceptions import NoNodeError

from gregor.metadata.applier import put_or_remove
from gregor.metadata.store import ACLS, BROKER_CONFIGS, ENTITY_CONFIGS, LOG_DIR_FAILURE, LogDirFailure
from gregor.metadata.zk_reading import ReadContext
from gregor.metadata.zk_znodes import (
    ACL_CHANGE_PREFIX,
    ACL_CHANGES,
    ACL_EXT_CHANGES,
    ACL_LITERAL,
    ACL_PREFIXED,
    CHANGE_EXPIRATION_MS,
    CONFIG_BROKERS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONFIG_CLIENTS,
    CONFIG_GROUPS,
    CONFIG_ROOT,
    CONFIG_USERS,
    LOG_DIR_EVENT_PREFIX,
    LOG_DIR_EVENTS,
    acl_path,
    acl_pattern_of,
    parse_acl_change,
    parse_acl_znode,
)
from gregor.security.acl import AccessControlEntry, ResourcePattern

log = logging.getLogger("gregor.metadata.zookeeper")

# The sequential notification roots a broker reads, with their znodes' name prefix.
NOTIFICATION_PREFIX = {CONFIG_CHANGES: CONFIG_CHANGE_PREFIX, ACL_CHANGES: ACL_CHANGE_PREFIX,
                       ACL_EXT_CHANGES: ACL_CHANGE_PREFIX}


class ConfigReader:
    """Configs, ACLs and log dir events of the image, kept from their znodes (called on the reader thread;
    the image under the context's lock)."""

    def __init__(self, ctx: ReadContext) -> None:
        self._ctx = ctx
        self.broker_configs: dict[str, dict[str, str]] = {}  # /config/brokers/<entity>, the non-empty ones
        self.entity_configs: dict[str, dict[str, str]] = {}  # /config/<entity path> (users, clients), non-empty
        self._log_dir_events: set[str] = set()  # the /log_dir_event_notification children published
        # /kafka-acl... znodes with ACLs: their entries and mzxid.
        self._acls: dict[ResourcePattern, tuple[frozenset[AccessControlEntry], int]] = {}
        # The sequence number of the last change notification read, per notification root (_notifications).
        self._seen: dict[str, int] = {CONFIG_CHANGES: -1, ACL_CHANGES: -1, ACL_EXT_CHANGES: -1}

    def acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern's entries (under the lock)."""
        return {p: e for p, (e, _) in self._acls.items()}

    def read_changed(self, paths: set[str]) -> None:
        """The config, ACL and notification znodes among changed `paths`: re-read and published."""
        if CONFIG_CHANGES in paths:
            self._read_config_changes()
        if LOG_DIR_EVENTS in paths:
            self._read_log_dir_events()
        entity_paths = {p[len(CONFIG_ROOT) + 1:] for p in paths
                        if p.startswith((CONFIG_USERS + "/", CONFIG_CLIENTS + "/", CONFIG_GROUPS + "/"))}
        if entity_paths:
            self._read_entity_configs(entity_paths)
        if CONFIG_BROKERS in paths:
            self._read_broker_configs(None)
        else:
            entities = {p.split("/")[3] for p in paths if p.startswith(CONFIG_BROKERS + "/") and p.count("/") == 3}
            if entities:
                self._read_broker_configs(entities)
        for root in (ACL_CHANGES, ACL_EXT_CHANGES):
            if root in paths:
                self._read_acl_changes(root)
        acl_patterns = {ap for ap in map(acl_pattern_of, paths) if ap is not None}
        if acl_patterns:
            self._read_acls(acl_patterns)

    def reload(self) -> None:
        """Everything read again with its watch (start, new session, reconnection); what changed is published."""
        self._read_broker_configs(None)
        self._read_entity_configs(None)
        self._read_all_acls()
        self._read_log_dir_events()

    def _notifications(self, root: str, all_read: bool = False) -> list[tuple[str, bytes]]:
        """The sequential notifications under `root` (/config/changes, /kafka-acl-changes,
        /kafka-acl-extended-changes) newer than the last one read, oldest first, as (name, data); sets the
        children watch. With `all_read` (a full re-read of what they point to: start, new session,
        reconnection) every one is taken as read and none returned. Either way, as Kafka's listener does,
        the notifications older than CHANGE_EXPIRATION_MS (15 minutes: every broker read them long ago) are
        deleted; a broker that was away longer reads everything again on its new session."""
        prefix = NOTIFICATION_PREFIX[root]
        try:
            children = sorted((c for c in self._ctx.zk.get_children(root, watch=self._ctx.on_watch) if c.startswith(prefix)),
                              key=lambda c: _change_seq(c, prefix))
        except NoNodeError:
            children = []
        seen = self._seen[root]
        new = [] if all_read else [c for c in children if _change_seq(c, prefix) > seen]
        reads = {c: self._ctx.call(self._ctx.zk.get_async, f"{root}/{c}") for c in new}
        out: list[tuple[str, bytes]] = []
        for c, r in reads.items():
            try:
                out.append((c, r.get()[0]))
            except NoNodeError:  # purged meanwhile by another broker
                continue
        if children:
            self._seen[root] = max(seen, _change_seq(children[-1], prefix))
        self._purge_notifications(root, children)
        return out

    def _purge_notifications(self, root: str, children: list[str]) -> None:
        """Delete the expired notifications, oldest first: sequence order is creation order, so the first one
        younger than CHANGE_EXPIRATION_MS ends the walk (one read when nothing is due)."""
        now_ms = time.time() * 1000
        for c in children:
            try:
                st = self._ctx.call(self._ctx.zk.exists_async, f"{root}/{c}").get()
            except NoNodeError:
                continue
            if st is None:
                continue
            if now_ms - st.ctime <= CHANGE_EXPIRATION_MS:
                break
            self._ctx.call(self._ctx.zk.delete_async, f"{root}/{c}")  # another broker may win: errors ignored

    def _read_config_changes(self) -> None:
        """New /config/changes notifications: re-read each entity they name."""
        paths: set[str] = set()
        for _, data in self._notifications(CONFIG_CHANGES):
            try:
                path = str(json.loads(data).get("entity_path", ""))
            except (ValueError, AttributeError):  # not ours to read
                continue
            if path.startswith(("users/", "clients/", "groups/")):
                paths.add(path)
        if paths:
            self._read_entity_configs(paths)

    def _read_log_dir_events(self) -> None:
        """Log dir failure notifications (and the children watch): each new one published with its broker
        and partitions, each gone one (the controller handled it) published as gone."""
        children = {c for c in self._ctx.zk.get_children(LOG_DIR_EVENTS, watch=self._ctx.on_watch)
                    if c.startswith(LOG_DIR_EVENT_PREFIX)}
        new = sorted(children - self._log_dir_events)
        gone = sorted(self._log_dir_events - children)
        reads = [(c, self._ctx.call(self._ctx.zk.get_async, f"{LOG_DIR_EVENTS}/{c}")) for c in new]
        events: list[tuple[str, LogDirFailure | None]] = [(c, None) for c in gone]
        for c, r in reads:
            try:
                doc = json.loads(r.get()[0])
                failure = LogDirFailure(int(doc["broker"]), tuple((str(t), int(p)) for t, p in doc.get("partitions", ())))
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring the log dir event %s: not one this broker can read", c)
                continue
            events.append((c, failure))
        self._log_dir_events = children
        with self._ctx.lock:
            for c, failure in events:
                self._ctx.publish_locked(LOG_DIR_FAILURE, entity=c, log_dir_failure=failure)

    def _all_entity_paths(self) -> set[str]:
        out: set[str] = set()
        for kind, root in (("users", CONFIG_USERS), ("clients", CONFIG_CLIENTS), ("groups", CONFIG_GROUPS)):
            try:
                names = self._ctx.zk.get_children(root)
            except NoNodeError:
                continue
            for n in names:
                out.add(f"{kind}/{n}")
                if kind == "users":
                    try:
                        out.update(f"users/{n}/clients/{c}" for c in self._ctx.zk.get_children(f"{root}/{n}/clients"))
                    except NoNodeError:
                        pass
        return out

    def _read_entity_configs(self, paths: set[str] | None) -> None:
        """User/client configs at `paths` (entity paths), or all of them for None; publishes ENTITY_CONFIGS
        for each that changed (a removed or empty znode: no configs)."""
        if paths is None:
            paths = self._all_entity_paths()
            with self._ctx.lock:
                paths |= set(self.entity_configs)
            self._notifications(CONFIG_CHANGES, all_read=True)
        reads = {p: self._ctx.call(self._ctx.zk.get_async, f"{CONFIG_ROOT}/{p}") for p in paths}
        for p, r in reads.items():
            try:
                configs = {str(k): str(v) for k, v in (json.loads(r.get()[0] or b"{}").get("config") or {}).items()}
            except (NoNodeError, ValueError):
                configs = {}
            self._keep_configs(self.entity_configs, ENTITY_CONFIGS, p, configs)

    def _read_broker_configs(self, entities: set[str] | None) -> None:
        """Dynamic broker configs: the named entities, or all of them (and the children watch) for None;
        publishes BROKER_CONFIGS for each that changed (a removed znode or an empty one: no configs)."""
        if entities is None:
            entities = set(self._ctx.zk.get_children(CONFIG_BROKERS, watch=self._ctx.on_watch))
            with self._ctx.lock:
                entities |= set(self.broker_configs)
        reads = {e: self._ctx.get_watched(f"{CONFIG_BROKERS}/{e}") for e in entities}
        for e, r in reads.items():
            try:
                configs = {str(k): str(v) for k, v in json.loads(r.get()[0]).get("config", {}).items()}
            except NoNodeError:
                configs = {}
            self._keep_configs(self.broker_configs, BROKER_CONFIGS, e, configs)

    def _keep_configs(self, table: dict[str, dict[str, str]], kind: str, key: str, configs: dict[str, str]) -> None:
        """`configs` read for `key` into the image's `table`, published as `kind` only if they changed it."""
        with self._ctx.lock:
            if configs != table.get(key, {}):
                put_or_remove(table, key, configs)
                self._ctx.publish_locked(kind, entity=key, configs=dict(configs))

    # --- ACLs: the znodes, found again through Kafka's change notifications ---------------------------
    def _read_all_acls(self) -> None:
        """Every ACL znode and the notification watches (start, new session, reconnection); publishes what
        changed. Notifications already there are taken as read (their patterns are read anyway) and the
        expired ones deleted."""
        patterns: set[ResourcePattern] = set()
        for root in (ACL_LITERAL, ACL_PREFIXED):
            types = self._ctx.zk.get_children(root)
            reads = {t: self._ctx.call(self._ctx.zk.get_children_async, f"{root}/{t}") for t in types}
            for t, r in reads.items():
                try:
                    names = r.get()
                except NoNodeError:
                    continue
                patterns.update(ap for ap in (acl_pattern_of(f"{root}/{t}/{n}") for n in names) if ap is not None)
        with self._ctx.lock:
            patterns |= set(self._acls)
        for root in (ACL_CHANGES, ACL_EXT_CHANGES):
            self._notifications(root, all_read=True)
        self._read_acls(patterns)

    def _read_acl_changes(self, root: str) -> None:
        """New notifications under `root`: the patterns they name are read again."""
        patterns: set[ResourcePattern] = set()
        for c, data in self._notifications(root):
            ap = parse_acl_change(root, data)
            if ap is None:
                log.warning("ignoring the unreadable ACL change notification %s/%s: %r", root, c, data[:200])
            else:
                patterns.add(ap)
        self._read_acls(patterns)

    def _read_acls(self, patterns: set[ResourcePattern]) -> None:
        """Read the patterns' znodes; publish ACLS for each whose ACLs changed (a removed znode: none left)."""
        reads = {ap: self._ctx.call(self._ctx.zk.get_async, acl_path(ap)) for ap in patterns}
        for ap, r in reads.items():
            try:
                data, stat = r.get()
                entries, mzxid = parse_acl_znode(data), stat.mzxid
            except NoNodeError:
                entries, mzxid = frozenset(), -1
            with self._ctx.lock:
                cur = self._acls.get(ap)
                if cur is None and not entries:
                    continue
                if cur is not None and mzxid != -1 and mzxid <= cur[1]:
                    continue  # not newer than what was published
                if entries:
                    self._acls[ap] = (entries, mzxid)
                else:
                    self._acls.pop(ap, None)
                self._ctx.publish_locked(ACLS, acl_pattern=ap, acls=entries)


def _change_seq(name: str, prefix: str) -> int:
    """acl_changes_0000000042 -> 42, config_change_0000000007 -> 7 (-1 for a name not of that form)."""
    tail = name[len(prefix):] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else -1
