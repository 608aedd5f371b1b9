"""The quorum controller's answers to brokers (KIP-631, KIP-497): what the active controller of a KRaft quorum
does with BrokerRegistration, BrokerHeartbeat, UnregisterBroker, AlterPartition, AllocateProducerIds,
MetadataWrite and Envelope (KIP-590: run by the node's Controller, see gregor.api.forwarding), and the
broker sessions it keeps.

Every decision is made against the metadata the store replayed (gregor.metadata.kraft) and written
through its one write path (`append_decided`: decided and appended as one batch, answered once
committed), so two decisions never race and a deposed controller's writes fail. A node that is not the
active controller answers NOT_CONTROLLER and the broker asks the new one.

Sessions (Kafka's BrokerHeartbeatManager): each heartbeat of a registered broker extends its session by
`broker.session.timeout.ms`; a broker whose session ended is fenced (one FenceBrokerRecord per broker,
checked every eighth of the timeout), and the controller that elects partition leaders (the active
node's Controller, reading the same cache) then moves its leaderships and takes it out of the ISRs. A
new active controller gives every registered broker a full session. A broker is registered fenced and
unfenced by the first heartbeat that reports it replayed the metadata up to its registration.

Controlled shutdown: a heartbeat with want_shut_down marks the broker in controlled shutdown
(BrokerRegistrationChangeRecord), has the leader elections move its leaderships away
(`controlled_shutdown`, the same rules as the ZooKeeper mode's ControlledShutdown request), and once it
leads nothing fences it and answers should_shut_down.

The first active controller of a new quorum writes the bootstrap records `gregor storage format` left
in its metadata log dir (the feature levels, and what a migration from ZooKeeper brings).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gregor.configdef import Settings, setting
from gregor.metadata import kraft_records as kr
from gregor.metadata.applier import decide_state_update
from gregor.metadata.applier import replay as replay_shared
from gregor.metadata.kraft import KRaftMetadataStore, decide_changes, error_code_of
from gregor.metadata.kraft_lifecycle import SECURITY_PROTOCOL_NAMES
from gregor.metadata.kraft_state import KRaftState, overlay
from gregor.metadata.records import PartitionStateRecord
from gregor.metadata.store import ControllerMovedError, MetadataError, PartitionState, StateUpdate
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages import kraft_controller as msgs
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Struct

log = logging.getLogger("gregor.controller.quorum")

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE, chosen by the controller

# The stopping broker's leaderships moved by the leader elections: (broker id, broker epoch) -> (error, remaining).
ShutdownHandler = Callable[[int, int], Awaitable[tuple[int, list[tuple[str, int]]]]]


@dataclass(frozen=True, slots=True)
class QuorumControllerSettings(Settings):
    node_id: int = setting("node.id")
    session_timeout_ms: int = setting("broker.session.timeout.ms")


class QuorumController:
    """The active controller's side of the brokers' requests (see the module doc)."""

    def __init__(self, settings: QuorumControllerSettings, store: KRaftMetadataStore,
                 bootstrap: list[bytes] | None = None) -> None:
        """`bootstrap`: the encoded records the first controller writes (default: the feature levels)."""
        self.settings = settings
        self.store = store
        self.session_s = settings.session_timeout_ms / 1000
        self._bootstrap = bootstrap or [kr.encode(r) for r in default_bootstrap()]
        self._sessions: dict[int, float] = {}  # broker id -> monotonic deadline, on the active controller
        self.shutdown_handler: ShutdownHandler | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handlers: dict[int, Callable[[int, Struct], Awaitable[dict[str, Any]]]] = {
            msgs.BROKER_REGISTRATION.key: self._registration, msgs.BROKER_HEARTBEAT.key: self._heartbeat,
            msgs.UNREGISTER_BROKER.key: self._unregister, msgs.ALTER_PARTITION.key: self._alter_partition,
            msgs.ALLOCATE_PRODUCER_IDS.key: self._allocate_producer_ids, msgs.METADATA_WRITE.key: self._metadata_write,
            msgs.ENVELOPE.key: self._envelope,
        }
        # Forwarded requests (KIP-590): run by the node's partition-leader Controller (gregor.api.forwarding),
        # set once that exists; until then an Envelope is answered NOT_CONTROLLER and sent again.
        self.envelope_handler: Callable[[int, Struct], Awaitable[dict[str, Any]]] | None = None
        store.on_activation.append(self._activated)

    # --- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._fence_expired(), name=f"controller-{self.settings.node_id}-sessions")

    async def stop(self) -> None:
        for t in [self._task, *self._tasks]:
            if t is not None:
                t.cancel()
        await asyncio.gather(*[t for t in [self._task, *self._tasks] if t is not None], return_exceptions=True)
        self._task = None

    def _spawn(self, coro: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _activated(self, epoch: int) -> None:
        """This node became the active controller: a full session for every registered broker, and the
        bootstrap records if the log has none yet."""
        deadline = time.monotonic() + self.session_s
        self._sessions = {b: deadline for b in self.store.state.brokers}
        if kr.METADATA_VERSION_FEATURE not in self.store.state.features:
            self._spawn(self._write_bootstrap(epoch))

    async def _write_bootstrap(self, epoch: int) -> None:
        def build(state: KRaftState) -> tuple[None, list[bytes]]:
            return None, ([] if kr.METADATA_VERSION_FEATURE in state.features else list(self._bootstrap))

        try:
            _, offset = await self.store.append_decided(build, epoch)
            log.info("controller %d: wrote the %d bootstrap records (up to offset %d)", self.settings.node_id,
                     len(self._bootstrap), offset)
        except MetadataError as e:
            log.warning("controller %d: the bootstrap records were not written: %s", self.settings.node_id, e)

    # --- requests -------------------------------------------------------------------------------------
    async def handle(self, api_key: int, version: int, body: Struct) -> dict[str, Any]:
        """The response body to one of the brokers' requests (a NOT_CONTROLLER answer when not active)."""
        handler = self._handlers[api_key]
        if self.store.active_epoch < 0:
            return {"error_code": ErrorCode.NOT_CONTROLLER, "error_message": "not the active controller"}
        try:
            return await handler(version, body)
        except ControllerMovedError as e:
            return {"error_code": ErrorCode.NOT_CONTROLLER, "error_message": str(e)}
        except MetadataError as e:
            log.warning("controller %d: %s failed: %s", self.settings.node_id, msgs.CONTROLLER_APIS[api_key].name, e)
            return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(e)}

    def _session_alive(self, broker_id: int) -> bool:
        return self._sessions.get(broker_id, 0.0) > time.monotonic()

    async def _registration(self, version: int, body: Struct) -> dict[str, Any]:
        if body.cluster_id != self.store.cluster_id:
            return {"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID}
        for f in body.features:
            if f.name == kr.METADATA_VERSION_FEATURE and not (
                    f.min_supported_version <= kr.METADATA_VERSION <= f.max_supported_version):
                return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        broker_id, incarnation = body.broker_id, body.incarnation_id
        if not body.listeners:
            return {"error_code": ErrorCode.INVALID_REQUEST}
        record = kr.RegisterBrokerRecord(
            broker_id, incarnation, tuple(kr.Endpoint(x.name, x.host, x.port,
                                                      SECURITY_PROTOCOL_NAMES.get(x.security_protocol, "PLAINTEXT"))
                                          for x in body.listeners),
            body.rack, True, body.listeners[0].name)

        def build(state: KRaftState) -> tuple[int, list[bytes]]:
            old = state.brokers.get(broker_id)
            if old is not None and old.incarnation_id == incarnation:
                return old.epoch, []  # a retried registration: the one already written
            if (old is not None and not old.fenced and self._session_alive(broker_id)
                    and body.previous_broker_epoch != old.epoch):
                return ErrorCode.DUPLICATE_BROKER_REGISTRATION, []
            return -1, [kr.encode(record)]

        code_or_epoch, offset = await self.store.append_decided(build)
        if code_or_epoch == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            return {"error_code": ErrorCode.DUPLICATE_BROKER_REGISTRATION}
        epoch = code_or_epoch if code_or_epoch >= 0 else offset
        self._sessions[broker_id] = time.monotonic() + self.session_s
        log.info("controller %d: broker %d registered (incarnation %s): broker epoch %d", self.settings.node_id,
                 broker_id, incarnation, epoch)
        return {"error_code": ErrorCode.NONE, "broker_epoch": epoch}

    async def _heartbeat(self, version: int, body: Struct) -> dict[str, Any]:
        broker_id, epoch = body.broker_id, body.broker_epoch
        reg = self.store.state.brokers.get(broker_id)
        if reg is None:
            return {"error_code": ErrorCode.BROKER_ID_NOT_REGISTERED}
        if reg.epoch != epoch:
            return {"error_code": ErrorCode.STALE_BROKER_EPOCH}
        self._sessions[broker_id] = time.monotonic() + self.session_s
        caught_up = body.current_metadata_offset >= reg.epoch
        if body.want_shut_down:
            should = await self._controlled_shutdown(broker_id, epoch)
            reg = self.store.state.brokers.get(broker_id, reg)
            return {"error_code": ErrorCode.NONE, "is_caught_up": caught_up, "is_fenced": reg.fenced,
                    "should_shut_down": should}
        if reg.fenced and caught_up and not body.want_fence:
            await self._write_if(broker_id, epoch, lambda r: r.fenced, kr.UnfenceBrokerRecord(broker_id, epoch))
            log.info("controller %d: broker %d (epoch %d) caught up: unfenced", self.settings.node_id, broker_id, epoch)
        elif not reg.fenced and body.want_fence:
            await self._write_if(broker_id, epoch, lambda r: not r.fenced, kr.FenceBrokerRecord(broker_id, epoch))
        reg = self.store.state.brokers.get(broker_id, reg)
        return {"error_code": ErrorCode.NONE, "is_caught_up": caught_up, "is_fenced": reg.fenced,
                "should_shut_down": False}

    async def _write_if(self, broker_id: int, epoch: int, still: Callable[[Any], bool], record: Any) -> None:
        """Write `record` about a registration if it is still that one and `still(registration)` holds."""
        def build(state: KRaftState) -> tuple[None, list[bytes]]:
            reg = state.brokers.get(broker_id)
            return None, ([kr.encode(record)] if reg is not None and reg.epoch == epoch and still(reg) else [])

        await self.store.append_decided(build)

    async def _controlled_shutdown(self, broker_id: int, epoch: int) -> bool:
        reg = self.store.state.brokers[broker_id]
        if reg.fenced:
            return True
        if not reg.in_controlled_shutdown:
            await self._write_if(broker_id, epoch, lambda r: not r.in_controlled_shutdown,
                                 kr.BrokerRegistrationChangeRecord(broker_id, epoch, True))
            log.info("controller %d: broker %d is in a controlled shutdown", self.settings.node_id, broker_id)
        if self.shutdown_handler is None:
            return False
        error, remaining = await self.shutdown_handler(broker_id, epoch)
        if error != ErrorCode.NONE or remaining:
            return False
        await self._write_if(broker_id, epoch, lambda r: not r.fenced, kr.FenceBrokerRecord(broker_id, epoch))
        self._sessions.pop(broker_id, None)
        log.info("controller %d: broker %d leads nothing any more: fenced, it may shut down", self.settings.node_id,
                 broker_id)
        return True

    async def _unregister(self, version: int, body: Struct) -> dict[str, Any]:
        broker_id = body.broker_id

        def build(state: KRaftState) -> tuple[int, list[bytes]]:
            reg = state.brokers.get(broker_id)
            if reg is None:
                return ErrorCode.BROKER_ID_NOT_REGISTERED, []
            return ErrorCode.NONE, [kr.encode(kr.UnregisterBrokerRecord(broker_id, reg.epoch))]

        code, _ = await self.store.append_decided(build)
        self._sessions.pop(broker_id, None)
        return {"error_code": code, "error_message": None}

    async def _fence_expired(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, self.session_s / 8))
            if self.store.active_epoch < 0:
                continue
            now = time.monotonic()
            expired = {b: r.epoch for b, r in self.store.state.brokers.items()
                       if not r.fenced and self._sessions.get(b, now + self.session_s) <= now}
            if not expired:
                continue

            def build(state: KRaftState, expired: dict[int, int] = expired) -> tuple[list[int], list[bytes]]:
                fenced = [b for b, e in expired.items() if (r := state.brokers.get(b)) is not None
                          and r.epoch == e and not r.fenced]
                return fenced, [kr.encode(kr.FenceBrokerRecord(b, expired[b])) for b in fenced]

            try:
                fenced, _ = await self.store.append_decided(build)
                for b in fenced:
                    log.warning("controller %d: broker %d had no heartbeat for %.0f ms (broker.session.timeout.ms): "
                                "fenced", self.settings.node_id, b, self.session_s * 1000)
            except MetadataError as e:
                log.info("controller %d: fencing %s: %s", self.settings.node_id, sorted(expired), e)

    async def _alter_partition(self, version: int, body: Struct) -> dict[str, Any]:
        broker_id = body.broker_id
        reg = self.store.state.brokers.get(broker_id)
        if reg is None or (body.broker_epoch != -1 and body.broker_epoch != reg.epoch):
            return {"error_code": ErrorCode.STALE_BROKER_EPOCH, "topics": []}

        def build(state: KRaftState) -> tuple[list[dict[str, Any]], list[bytes]]:
            return decide_alter_partition(state, broker_id, version, body.topics)

        topics, _ = await self.store.append_decided(build)
        return {"error_code": ErrorCode.NONE, "topics": topics}

    async def _allocate_producer_ids(self, version: int, body: Struct) -> dict[str, Any]:
        reg = self.store.state.brokers.get(body.broker_id)
        if reg is None or reg.epoch != body.broker_epoch:
            return {"error_code": ErrorCode.STALE_BROKER_EPOCH}

        def build(state: KRaftState) -> tuple[int, list[bytes]]:
            start = state.next_producer_id
            if start > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
                raise MetadataError("producer ids are exhausted")
            return start, [kr.encode(kr.ProducerIdsRecord(body.broker_id, body.broker_epoch,
                                                          start + PRODUCER_ID_BLOCK_SIZE))]

        start, _ = await self.store.append_decided(build)
        return {"error_code": ErrorCode.NONE, "producer_id_start": start, "producer_id_len": PRODUCER_ID_BLOCK_SIZE}

    async def _envelope(self, version: int, body: Struct) -> dict[str, Any]:
        if self.envelope_handler is None:
            return {"response_data": None, "error_code": ErrorCode.NOT_CONTROLLER}
        return await self.envelope_handler(version, body)

    async def _metadata_write(self, version: int, body: Struct) -> dict[str, Any]:
        try:
            changes = [kr.decode_change(v) for v in body.changes]
        except DecodeError as e:
            return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": f"undecodable change: {e}",
                    "results": []}
        results, offset = await self.store.append_decided(lambda st: decide_changes(st, changes))
        return {"error_code": ErrorCode.NONE, "error_message": None, "results": [
            {"error_code": ErrorCode.NONE, "error_message": None, "offset": offset} if r is None else
            {"error_code": error_code_of(r), "error_message": str(r), "offset": -1} for r in results]}


def default_bootstrap() -> list[Any]:
    """What a formatted quorum starts with: its metadata.version."""
    return [kr.FeatureLevelRecord(kr.METADATA_VERSION_FEATURE, kr.METADATA_VERSION)]


def decide_alter_partition(state: KRaftState, broker_id: int, version: int, topics: list[Any]
                           ) -> tuple[list[dict[str, Any]], list[bytes]]:
    """A leader's ISR changes (KIP-497): each must come from the partition's leader at its leader epoch and
    partition epoch (else FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION), keep the leader in the ISR, and add
    only assigned replicas that are live and not shutting down (else INELIGIBLE_REPLICA, KIP-841)."""
    scratch = overlay(state)
    by_id = {t.topic_id: name for name, t in state.meta.topics.items()} if version >= 2 else {}
    eligible = {b for b, r in state.brokers.items() if not r.fenced and not r.in_controlled_shutdown}
    out: list[dict[str, Any]] = []
    by_topic: dict[str, dict[int, PartitionState]] = {}
    for t in topics:
        name = by_id.get(t.topic_id) if version >= 2 else t.topic_name
        parts = []
        for p in t.partitions:
            isr = [x.broker_id for x in p.new_isr_with_epochs] if version >= 3 else list(p.new_isr)
            answer = {"partition_index": p.partition_index, "error_code": ErrorCode.NONE, "leader_id": -1,
                      "leader_epoch": -1, "isr": [], "leader_recovery_state": 0, "partition_epoch": -1}
            topic = scratch.topic(name) if name is not None else None
            cur = topic.partitions.get(p.partition_index) if topic is not None else None
            if cur is None:
                answer["error_code"] = (ErrorCode.UNKNOWN_TOPIC_ID if version >= 2 else
                                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif cur.leader != broker_id:
                answer["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif p.leader_epoch != cur.leader_epoch:
                answer["error_code"] = ErrorCode.FENCED_LEADER_EPOCH
            elif p.partition_epoch != cur.version:
                answer["error_code"] = ErrorCode.INVALID_UPDATE_VERSION
            elif broker_id not in isr or any(r not in cur.replicas for r in isr) or len(set(isr)) != len(isr):
                answer["error_code"] = ErrorCode.INVALID_REQUEST
            elif any(r not in cur.isr and r not in eligible for r in isr):
                answer["error_code"] = ErrorCode.INELIGIBLE_REPLICA
            else:
                assert name is not None
                new = PartitionState(list(cur.replicas), cur.leader, cur.leader_epoch, isr, cur.controller_epoch)
                record = decide_state_update(StateUpdate(name, p.partition_index, new, cur.version), scratch)
                replay_shared(scratch, record, None)
                s = record.partitions[p.partition_index]
                by_topic.setdefault(name, {})[p.partition_index] = s
                answer.update(leader_id=s.leader, leader_epoch=s.leader_epoch, isr=list(s.isr),
                              partition_epoch=s.version)
            if cur is not None and answer["error_code"] != ErrorCode.NONE:
                answer.update(leader_id=cur.leader, leader_epoch=cur.leader_epoch, isr=list(cur.isr),
                              partition_epoch=cur.version)
            parts.append(answer)
        out.append({"topic_name": t.get("topic_name", ""), "topic_id": t.get("topic_id", uuid.UUID(int=0)),
                    "partitions": parts})
    return out, [kr.encode(PartitionStateRecord(n, ps)) for n, ps in by_topic.items()]
