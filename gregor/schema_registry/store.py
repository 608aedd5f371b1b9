"""The `_schemas` topic as the registry uses it: a reader applying every record in order, and writes
that count only once their record has been read back and accepted.

The reader is one task fetching partition 0 from where it left off (long-polling at the end) and
applying each record to the RegistryState. A write appends its record with acks=all, then waits until
the reader has applied that offset, and reports what applying it did: a record rejected there (another
instance wrote first, see gregor.schema_registry.state) is a failed write, never an acknowledged one.
`catch_up` waits until the reader has reached the topic's end offset as of the call: the primary does
it before deciding anything (so a new primary has read every acknowledged write before it issues an id),
and a follower does it after forwarding a write (so its next read sees it).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable

from gregor.schema_registry import errors
from gregor.schema_registry.kafka import KafkaClient, KafkaRequestError
from gregor.schema_registry.records import SCHEMA, Key, encode_value
from gregor.schema_registry.state import Applied, RegistryState

log = logging.getLogger("gregor.schema_registry")

PARTITION = 0
_POLL_WAIT_MS = 500
_APPLY_SLICE = 500  # records applied between yields to the loop (a registry may share a broker's loop)
_REJECTIONS_KEPT = 1000
_MESSAGE_TOO_LARGE = (10, 18)  # MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE


class SchemaStore:
    def __init__(self, kafka: KafkaClient, topic: str, state: RegistryState, *, timeout_s: float,
                 may_repair: Callable[[], bool] = lambda: False) -> None:
        self.kafka = kafka
        self.topic = topic
        self.state = state
        self.timeout_s = timeout_s
        self.may_repair = may_repair  # whether this instance (the primary) rewrites what a rejected record hid
        self.next_offset = 0
        self._rejections: collections.OrderedDict[int, Applied] = collections.OrderedDict()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._repairs: set[asyncio.Task[None]] = set()
        self.reader_error: str | None = None

    # --- start and stop -----------------------------------------------------------------------------
    async def ensure_topic(self, replication_factor: int) -> None:
        """Create the topic as Confluent does (one partition, compacted) unless it exists; refuse one that
        has more than one partition (the records' order is the registry's truth)."""
        partitions = await self.kafka.topic_partitions(self.topic)
        if partitions is None:
            rf = max(1, min(replication_factor, await self.kafka.live_brokers()))
            created = await self.kafka.create_topic(self.topic, 1, rf, {"cleanup.policy": "compact"})
            if created:
                log.info("Created the schema registry topic %s (1 partition, replication factor %d, compacted)",
                         self.topic, rf)
            deadline = time.monotonic() + self.timeout_s
            while (partitions := await self.kafka.topic_partitions(self.topic)) is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        if partitions != 1:
            raise errors.store_error(f"the schema registry topic {self.topic} has {partitions} partitions: it must "
                                     f"have exactly one")

    def start(self) -> None:
        self._task = asyncio.create_task(self._read(), name=f"schema-registry-reader-{self.topic}")

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._repairs] if t is not None]
        self._task = None
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        for _, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters.clear()

    # --- reading ------------------------------------------------------------------------------------
    async def _read(self) -> None:
        where = f"{self.topic}-{PARTITION}"
        backoff = 0.1
        while True:
            try:
                records, next_offset, _hw = await self.kafka.fetch(self.topic, PARTITION, self.next_offset, _POLL_WAIT_MS)
                backoff = 0.1
                self.reader_error = None
            except (KafkaRequestError, ConnectionError, TimeoutError) as e:
                if self.reader_error != str(e):
                    log.warning("Reading %s: %s (retrying)", where, e)
                self.reader_error = str(e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            for i, r in enumerate(records):
                outcome = self.state.apply_record(r.offset, r.key, r.value, where)
                if not outcome.accepted:
                    self._rejected(outcome)
                if i % _APPLY_SLICE == _APPLY_SLICE - 1:
                    await asyncio.sleep(0)
            self.next_offset = max(self.next_offset, next_offset)
            self._wake()

    def _rejected(self, outcome: Applied) -> None:
        self._rejections[outcome.offset] = outcome
        while len(self._rejections) > _REJECTIONS_KEPT:
            self._rejections.popitem(last=False)
        if outcome.repair is not None and self.may_repair():
            v = outcome.repair
            log.warning("A rejected record at offset %d took the key of version %d of subject '%s': writing that "
                        "version again so that compaction keeps it", outcome.offset, v.version, v.subject)
            task = asyncio.create_task(self.kafka.produce(self.topic, PARTITION, Key(SCHEMA, v.subject, v.version).encode(),
                                                          encode_value(v)))
            self._repairs.add(task)
            task.add_done_callback(self._repairs.discard)

    def _wake(self) -> None:
        still = []
        for offset, fut in self._waiters:
            if offset < self.next_offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((offset, fut))
        self._waiters = still

    async def wait_applied(self, offset: int, timeout_s: float | None = None) -> None:
        """Wait until the record at `offset` (and everything before it) has been applied."""
        if offset < self.next_offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, self.timeout_s if timeout_s is None else timeout_s)
        except TimeoutError:
            why = f" ({self.reader_error})" if self.reader_error else ""
            raise errors.timeout(f"Timed out reading the schema registry topic {self.topic} to offset {offset}{why}") from None

    async def catch_up(self, timeout_s: float | None = None) -> None:
        """Wait until every record in the topic as of now has been applied."""
        try:
            end = await self.kafka.list_offset(self.topic, PARTITION)
        except (KafkaRequestError, ConnectionError, TimeoutError) as e:
            raise errors.store_error(f"Cannot read the end offset of {self.topic}: {e}") from None
        if end > 0:
            await self.wait_applied(end - 1, timeout_s)

    # --- writing ------------------------------------------------------------------------------------
    async def write(self, key: Key, value: bytes | None) -> Applied:
        """Append one record and wait until it is applied; returns what applying it did."""
        try:
            offset = await self.kafka.produce(self.topic, PARTITION, key.encode(), value)
        except KafkaRequestError as e:
            if e.code in _MESSAGE_TOO_LARGE:
                raise errors.schema_too_large(f"Schema too large for the schema registry topic {self.topic}: {e}") from None
            raise errors.store_error(f"Error while writing to the schema registry topic {self.topic}: {e}") from None
        except (ConnectionError, TimeoutError) as e:
            raise errors.store_error(f"Error while writing to the schema registry topic {self.topic}: {e}") from None
        await self.wait_applied(offset)
        return self._rejections.get(offset) or Applied(offset)
