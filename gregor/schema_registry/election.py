"""Which registry instance is the primary: elected through Kafka's group protocol, as Confluent does.

Every instance sharing the `_schemas` topic joins one group (`schema.registry.group.id`, protocol type
"sr") with its identity as member metadata: the URL writes are forwarded to and whether it may lead.
The group coordinator picks a group leader; the leader's SyncGroup assignment names the primary (the
current primary again if it is still a member and eligible, so a rebalance does not move it for
nothing; else the eligible member with the smallest member id), and every member learns it from its
own assignment. A member whose session expires, or that leaves, triggers a rebalance and a new choice.

The protocol name is Gregor's own ("gregor-v1"): a Confluent instance joining the same group gets
INCONSISTENT_GROUP_PROTOCOL instead of sharing a primary whose write rules it does not know.

Safety does not rest on the election alone (two members may both believe they lead for a moment:
one paused past its session, the other just elected): every write is decided by the order of the
records in the topic (gregor.schema_registry.state), and a primary writes only while its last
heartbeat is less than half a session old.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.client.broker_client import BrokerConnectionError
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.groups import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP
from gregor.protocol.schema import Api, Struct
from gregor.schema_registry.kafka import KafkaClient, KafkaRequestError

log = logging.getLogger("gregor.schema_registry.election")

PROTOCOL_TYPE = "sr"
PROTOCOL_NAME = "gregor-v1"
_REJOIN = (ErrorCode.REBALANCE_IN_PROGRESS,)
_RESET_MEMBER = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID)


@dataclass(frozen=True, slots=True)
class Identity:
    url: str
    eligible: bool

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "url": self.url, "leader_eligibility": self.eligible}).encode()

    @staticmethod
    def decode(raw: bytes | memoryview | None) -> Identity | None:
        try:
            obj = json.loads(bytes(raw or b""))
            return Identity(str(obj["url"]), bool(obj.get("leader_eligibility", True)))
        except (ValueError, KeyError, TypeError):
            return None


def choose_primary(members: list[tuple[str, Identity | None]], current: Identity | None) -> tuple[str, Identity] | None:
    """The (member id, identity) to lead: the current primary if still an eligible member, else the
    eligible member with the smallest id; None when no member may lead."""
    eligible = sorted((m, i) for m, i in members if i is not None and i.eligible)
    for m, i in eligible:
        if current is not None and i.url == current.url:
            return m, i
    return eligible[0] if eligible else None


class PrimaryElector:
    """One instance's membership in the group. `primary` is the elected identity (None while unknown)."""

    def __init__(self, kafka: KafkaClient, group_id: str, identity: Identity, *, session_timeout_ms: int,
                 heartbeat_interval_ms: int, on_change: Callable[[Identity | None], None] | None = None) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.identity = identity
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.on_change = on_change
        self.primary: Identity | None = None
        self._last_primary: Identity | None = None  # kept through rebalances, so the leader can keep it
        self.member_id = ""
        self.generation = -1
        self._coordinator: int | None = None
        self._last_heartbeat = 0.0
        self._task: asyncio.Task[None] | None = None
        self._known = asyncio.Event()

    @property
    def is_primary(self) -> bool:
        """This instance is the primary and its membership is fresh enough to write."""
        fresh = time.monotonic() - self._last_heartbeat < self.session_timeout_ms / 2000
        return self.primary is not None and self.primary.url == self.identity.url and fresh

    async def wait_primary(self, timeout_s: float) -> Identity | None:
        """The primary, waiting up to `timeout_s` while an election is under way."""
        if self.primary is None:
            try:
                await asyncio.wait_for(self._known.wait(), timeout_s)
            except TimeoutError:
                pass
        return self.primary

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="schema-registry-election")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self.member_id and self._coordinator is not None:
            try:  # leave at once, so the others elect a new primary without waiting out the session
                await asyncio.wait_for(self.kafka.send(LEAVE_GROUP, {
                    "group_id": self.group_id, "member_id": self.member_id,
                    "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": "shutdown"}]},
                    self._coordinator), 2.0)
            except (BrokerConnectionError, KafkaRequestError, TimeoutError):
                pass
        self._set_primary(None)

    def _set_primary(self, primary: Identity | None) -> None:
        if primary != self.primary:
            log.info("Schema registry primary: %s%s", primary.url if primary else "none",
                     " (this instance)" if primary is not None and primary.url == self.identity.url else "")
            self.primary = primary
            if primary is not None:
                self._last_primary = primary
            if self.on_change is not None:
                self.on_change(primary)
        if primary is None:
            self._known.clear()
        else:
            self._known.set()

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                self._coordinator = await self.kafka.find_coordinator(self.group_id)
                await self._join()
                backoff = 0.1
                await self._heartbeats()
            except (BrokerConnectionError, KafkaRequestError, TimeoutError) as e:
                log.info("Schema registry group %s: %s; rejoining", self.group_id, e)
                self._set_primary(None)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _request(self, api: Api, body: dict[str, Any]) -> Struct:
        resp, _ = await self.kafka.send(api, body, self._coordinator)
        return resp

    async def _join(self) -> None:
        while True:
            self._set_primary(None)
            resp = await self._request(JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.session_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "reason": None,
                "protocols": [{"name": PROTOCOL_NAME, "metadata": self.identity.encode()}]})
            if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if resp.error_code in _RESET_MEMBER:
                self.member_id = ""
                continue
            if resp.error_code in _REJOIN:
                continue
            if resp.error_code != ErrorCode.NONE:
                raise KafkaRequestError(resp.error_code, f"joining group {self.group_id}")
            self.member_id, self.generation = resp.member_id, resp.generation_id
            assignments = []
            if resp.leader == resp.member_id:
                members = [(m.member_id, Identity.decode(m.metadata)) for m in resp.members]
                chosen = choose_primary(members, self._last_primary)
                primary = {"member": chosen[0], "url": chosen[1].url} if chosen else None
                body = json.dumps({"version": 1, "error": 0 if chosen else 1, "primary": primary}).encode()
                assignments = [{"member_id": m, "assignment": body} for m, _ in members]
            sync = await self._request(SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "protocol_name": PROTOCOL_NAME,
                "assignments": assignments})
            if sync.error_code in _RESET_MEMBER:
                self.member_id = ""
                continue
            if sync.error_code in _REJOIN:
                continue
            if sync.error_code != ErrorCode.NONE:
                raise KafkaRequestError(sync.error_code, f"syncing group {self.group_id}")
            self._last_heartbeat = time.monotonic()
            self._set_primary(self._assigned(sync.assignment))
            return

    def _assigned(self, raw: bytes | memoryview | None) -> Identity | None:
        try:
            obj = json.loads(bytes(raw or b""))
            p = obj.get("primary") if obj.get("error") == 0 else None
            return Identity(str(p["url"]), True) if p else None
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("Schema registry group %s: unreadable assignment %r", self.group_id, bytes(raw or b""))
            return None

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            resp = await self._request(HEARTBEAT, {"group_id": self.group_id, "generation_id": self.generation,
                                                   "member_id": self.member_id, "group_instance_id": None})
            if resp.error_code == ErrorCode.NONE:
                self._last_heartbeat = time.monotonic()
                continue
            if resp.error_code in _RESET_MEMBER:
                self.member_id = ""
            if resp.error_code in _REJOIN or resp.error_code in _RESET_MEMBER:
                return  # rejoin
            raise KafkaRequestError(resp.error_code, f"heartbeat to group {self.group_id}")
