"""The coordinators' internal topics: `__consumer_offsets` (groups) and `__transaction_state` (transactions).

Both are created on first use, as Kafka does: the first request that needs one starts its creation
in the background and waits for it (or, for handlers that cannot wait, gets COORDINATOR_NOT_AVAILABLE
and retries). Their replication factor is capped by the live brokers at creation, with a warning (a
lone broker could otherwise never serve groups or transactions), and min.insync.replicas by the
replication factor. A coordinator is the leader of a partition of its topic: `led` lists the
partitions this broker leads with their leader epochs, `read_partition` replays one of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.broker")


class InternalTopic:
    def __init__(self, name: str, topic_admin: Any, metadata_cache: Any, partitions: int, replication_factor: int,
                 configs: dict[str, str], min_isr: int | None = None) -> None:
        self.name = name
        self._admin = topic_admin
        self._cache = metadata_cache
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.configs = configs
        self.min_isr = min_isr
        self._creation: asyncio.Future[None] | None = None
        self.error: KafkaError | None = None  # why the last creation failed

    def exists(self) -> bool:
        return self._cache.topic(self.name) is not None

    def ensure(self) -> None:
        """Raise COORDINATOR_NOT_AVAILABLE (clients retry) while the topic does not exist, starting its
        creation if none is under way."""
        if self.exists():
            return
        self.creation()
        err = self.error
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"cannot create {self.name}: {err}" if err is not None else f"{self.name} is being created")

    def creation(self) -> asyncio.Future[None] | None:
        """None once the topic exists; else a future done when the creation under way (started now if
        none is) ends, whether it succeeded or not."""
        if self.exists():
            return None
        if self._creation is None:
            self._creation = asyncio.ensure_future(self._create())
        return asyncio.shield(self._creation)

    async def _create(self) -> None:
        rf = self.replication_factor
        live = len(self._cache.brokers())
        if rf > live:
            log.warning("creating %s with replication factor %d: its configured replication factor is %d but only "
                        "%d brokers are live", self.name, max(live, 1), rf, live)
            rf = max(live, 1)
        configs = dict(self.configs)
        if self.min_isr is not None:
            configs["min.insync.replicas"] = str(min(self.min_isr, rf))
        try:
            await self._admin.create_topic(self.name, self.partitions, rf, configs=configs, internal_allowed=True)
            self.error = None
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s: %s", self.name, e)
                self.error = e
        finally:
            self._creation = None

    def led(self, replica_manager: Any) -> dict[int, int]:
        """The partitions this broker leads, with their leader epochs."""
        return {p: part.leader_epoch for (t, p), part in replica_manager.partitions.items()
                if t == self.name and part.is_leader}

    def read_partition(self, replica_manager: Any, log_manager: Any, p: int) -> Iterator[memoryview]:
        """The record sets of one partition, oldest first (a coordinator's replay)."""
        part = replica_manager.partitions.get((self.name, p))
        if part is None:
            return
        if not part.has_log and not log_manager.is_unopened(self.name, p):
            return  # a log not created yet holds nothing to replay (one left from a clean shutdown is opened)
        lg = part.log
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            data = lg.read(offset, 1 << 20, lg.log_end_offset)
            if data.next_offset <= offset:
                break
            yield data.records
            offset = data.next_offset
