"""Leader elections on request and automatic rebalancing, on the active controller.

ElectLeaders (43): a preferred (replicas[0], if live and in the ISR) or unclean (an offline partition
gets its first live replica) election for the given partitions or all. The automatic rebalance (every
`leader.imbalance.check.interval.seconds` when `auto.leader.rebalance.enable`) runs a preferred
election for the partitions of each broker whose leader imbalance is above
`leader.imbalance.per.broker.percentage`. The rules are gregor.controller.election's.

Both decide from the cache and write one fenced batch. A partition whose write lost a version race (its
leader changed its ISR meanwhile) is decided again from the fresh state once the cache shows it, at
most ELECTION_RACE_RETRIES times, as Kafka's controller retries on a ZooKeeper version conflict (it
does so without bound; a partition still changing after that is reported as UNKNOWN_SERVER_ERROR).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gregor.controller import election
from gregor.controller.context import ControllerContext, TopicPartition
from gregor.metadata.store import BadVersionError, ControllerMovedError, MetadataError, PartitionState
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.cluster_admin import PREFERRED_ELECTION, UNCLEAN_ELECTION

log = logging.getLogger("gregor.controller")

Decision = tuple[PartitionState | None, int]  # (state to write or None, error code)

ELECTION_RACE_RETRIES = 5


class LeaderElections:
    """ElectLeaders and the automatic rebalance of one controller (run under its lock, written through
    its fenced writes)."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctl = ctx

    async def elect_leaders(self, election_type: int, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Preferred (0) or unclean (1) election for the given partitions, or all (None: then partitions
        that needed no election are left out of the answer). Per partition (error code, message);
        answered once the new states are in the cache. Raises KafkaError(NOT_CONTROLLER)."""
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
        async with self.ctl.lock:
            self.ctl.require_active()
            everything = partitions is None
            if partitions is None:
                partitions = [(n, p) for n, t in self.ctl.cache.topics().items() for p in t.partitions]

            def decide(tp: TopicPartition, s: PartitionState) -> Decision:
                eligible = self.ctl.eligible()
                if election_type == PREFERRED_ELECTION:
                    return election.preferred(s, eligible, self.ctl.epoch)
                new, code = election.unclean(s, {b.broker_id for b in self.ctl.cache.brokers()}, eligible, self.ctl.epoch)
                if new is not None and new.leader not in s.isr:
                    log.warning("controller %d: unclean leader election for %s-%d by request: broker %d leads "
                                "from outside the ISR %s; acknowledged records may be lost",
                                self.ctl.broker_id, tp[0], tp[1], new.leader, s.isr)
                return new, code

            results, moved = await self._elect_partitions(list(partitions), decide)
            if everything:
                results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
            if moved:
                log.info("controller %d: %s election moved %d leaderships", self.ctl.broker_id,
                         "preferred" if election_type == PREFERRED_ELECTION else "unclean", moved)
            return results

    async def _elect_partitions(self, partitions: list[TopicPartition],
                                decide: Callable[[TopicPartition, PartitionState], Decision]
                                ) -> tuple[dict[TopicPartition, tuple[int, str | None]], int]:
        """Decide each partition from the cache and write the new states in one batch (under the lock).
        The partitions whose write lost a version race (a leader changed its ISR meanwhile) are decided
        again once the cache shows their newer state, at most ELECTION_RACE_RETRIES times. Returns per
        partition (error code, message) and the number of states written."""
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        todo, moved = partitions, 0
        for attempt in range(ELECTION_RACE_RETRIES + 1):
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for tp in todo:
                s = self.ctl.cache.partition_state(*tp)
                if s is None:
                    results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                    continue
                new, code = decide(tp, s)
                if new is not None:
                    updates[tp] = (new, s.version)
                results[tp] = (code, None if code == ErrorCode.NONE else _election_message(code, tp))
            raced: dict[TopicPartition, int] = {}
            for tp, r in (await self.ctl.write_states(updates, redecide=False)).items():
                if isinstance(r, BadVersionError):
                    raced[tp] = updates[tp][1]
                elif isinstance(r, MetadataError):
                    code = ErrorCode.NOT_CONTROLLER if isinstance(r, ControllerMovedError) else ErrorCode.UNKNOWN_SERVER_ERROR
                    results[tp] = (code, str(r))
                else:
                    moved += 1
            if not raced:
                break
            if not self.ctl.active or attempt == ELECTION_RACE_RETRIES:
                why = (f"Broker {self.ctl.broker_id} is no longer the controller" if not self.ctl.active else
                       f"the partition state changed during {ELECTION_RACE_RETRIES + 1} election attempts")
                code = ErrorCode.NOT_CONTROLLER if not self.ctl.active else ErrorCode.UNKNOWN_SERVER_ERROR
                results.update({tp: (code, why) for tp in raced})
                break

            def newer(raced: dict[TopicPartition, int] = raced) -> bool:
                return all((s := self.ctl.cache.partition_state(*tp)) is None or s.version > v for tp, v in raced.items())

            await self.ctl.wait_cache(newer, self.ctl.timeout_s)
            log.info("controller %d: %d elections lost a version race; deciding them again (attempt %d)",
                     self.ctl.broker_id, len(raced), attempt + 2)
            todo = list(raced)
        return results, moved

    async def rebalance(self) -> int:
        """One automatic rebalance pass: a preferred election for the partitions of every broker whose
        leader imbalance is above `leader.imbalance.per.broker.percentage`. Returns the leaderships moved."""
        async with self.ctl.lock:
            if not self.ctl.active:
                return 0
            rows = ((n, p, s) for n, t in self.ctl.cache.topics().items() for p, s in t.partitions.items())
            chosen = election.imbalanced(rows, self.ctl.eligible(),
                                         self.ctl.settings.leader_imbalance_per_broker_percentage)
            _, moved = await self._elect_partitions(
                chosen, lambda tp, s: election.preferred(s, self.ctl.eligible(), self.ctl.epoch))
            if moved:
                log.info("controller %d: leader rebalance moved %d leaderships to their preferred replicas",
                         self.ctl.broker_id, moved)
            return moved


def _election_message(code: int, tp: TopicPartition) -> str:
    if code == ErrorCode.ELECTION_NOT_NEEDED:
        return f"Leader election not needed for topic partition {tp[0]}-{tp[1]}"
    if code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE:
        return f"Failed to elect leader for partition {tp[0]}-{tp[1]}: the preferred replica is not live and in sync"
    if code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE:
        return f"Failed to elect leader for partition {tp[0]}-{tp[1]}: no live replica"
    return ErrorCode(code).name
