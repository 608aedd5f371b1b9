"""A metadata store for a lone broker: in memory, persisted in the log dir as a snapshot plus a journal.

It makes `gregor serve` work with nothing else installed, behind the same interface as the ZooKeeper
store. Changes are decided and replayed by gregor.metadata.applier (the rules every store shares) and
made durable by the journal (gregor.metadata.embedded_journal: files, format, compaction); this module
adds what a lone broker's store holds besides: the live registrations and the controller, which are
not persisted (as with ZooKeeper's ephemeral znodes), and the producer id blocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from gregor.metadata.applier import decide, decide_state_update, replay
from gregor.metadata.embedded_journal import FILE_NAME, JOURNAL_NAME, MetadataJournal
from gregor.metadata.records import PartitionStateRecord, Record
from gregor.metadata.store import (
    BROKERS,
    BrokerInfo,
    Change,
    ControllerMovedError,
    MetadataError,
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    StateUpdate,
)

__all__ = ["FILE_NAME", "JOURNAL_NAME", "PRODUCER_ID_BLOCK_FILE", "EmbeddedMetadataStore"]

PRODUCER_ID_BLOCK_FILE = "gregor-producer-id-block.json"
DEFAULT_SNAPSHOT_BYTES = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots

T = TypeVar("T")
R = TypeVar("R", bound=Record)


class EmbeddedMetadataStore(MetadataStore):
    def __init__(self, data_dir: str, broker_id: int, snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES) -> None:
        super().__init__()
        self._dir = data_dir
        self._broker_id = broker_id
        self._lock = threading.Lock()  # every read and write of the state below (and the journal's compaction)
        self._journal = MetadataJournal(data_dir, snapshot_bytes, self._lock)
        self._state = self._journal.state
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = broker_id  # a lone broker is its own controller once registered
        self._controller_epoch = 0

    # --- reads -------------------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self._journal.cluster_id

    @property
    def version(self) -> int:
        return self._state.version

    def snapshot(self) -> MetadataImage:
        with self._lock:
            return self._state.image(self.cluster_id, self._brokers_tuple(), self._controller_id())

    def _brokers_tuple(self) -> tuple[BrokerInfo, ...]:
        return tuple(sorted(self._brokers.values(), key=lambda b: b.broker_id))

    def _controller_id(self) -> int:
        return self._controller if self._controller in self._brokers else -1

    # --- registrations and the controller (in memory only) ---------------------------------
    def register_broker(self, info: BrokerInfo) -> int:
        """Live registrations are not persisted, as with ephemeral znodes. Several brokers may register
        with one embedded store (in-process clusters in tests); the broker epoch is the version."""
        with self._lock:
            self._state.version += 1
            self._brokers[info.broker_id] = dataclasses.replace(info, epoch=self._state.version)
            self._publish_brokers()
            return self._state.version

    def unregister_broker(self, broker_id: int) -> None:
        with self._lock:
            if self._brokers.pop(broker_id, None) is None:
                return
            if self._controller == broker_id:  # its ephemeral /controller goes with it
                self._controller = -1
            self._state.version += 1
            self._publish_brokers()

    def _publish_brokers(self) -> None:
        self._publish(MetadataEvent(self._state.version, BROKERS, brokers=self._brokers_tuple(),
                                    controller_id=self._controller_id()))

    def elect_controller(self, broker_id: int) -> int | None:
        with self._lock:
            if self._controller_id() not in (-1, broker_id):
                return None
            if broker_id not in self._brokers:
                raise MetadataError(f"broker {broker_id} is not registered")
            self._controller = broker_id
            # Not persisted (a lone broker's epochs start above every partition state's controller epoch).
            self._controller_epoch = max([self._controller_epoch] + [
                s.controller_epoch for t in self._state.topics.values() for s in t.partitions.values()]) + 1
            self._state.version += 1
            self._publish_brokers()
            return self._controller_epoch

    def resign_controller(self, broker_id: int, controller_epoch: int) -> None:
        with self._lock:
            if self._controller == broker_id and self._controller_epoch == controller_epoch:
                self._controller = -1
                self._state.version += 1
                self._publish_brokers()

    # --- changes: decided and replayed by the applier, made durable by the journal -------------
    def apply(self, changes: Sequence[Change]) -> list[int | MetadataError]:
        return self._write(changes, lambda ch: decide(ch, self._state), lambda _ch, _record, version: version)

    def update_partition_states(self, updates: Sequence[StateUpdate],
                                controller_epoch: int | None = None) -> list[int | MetadataError]:
        def decide_one(u: StateUpdate) -> PartitionStateRecord:
            if controller_epoch is not None and (controller_epoch != self._controller_epoch
                                                 or self._controller_id() == -1):
                raise ControllerMovedError(
                    f"controller epoch {controller_epoch} is not the current {self._controller_epoch}")
            return decide_state_update(u, self._state)

        # Each update's result is the partition state's new version (what a conditional write needs next).
        return self._write(updates, decide_one, lambda u, record, _version: record.partitions[u.partition].version)

    def _write(self, items: Sequence[T], decide_one: Callable[[T], R],
               result: Callable[[T, R, int], int]) -> list[int | MetadataError]:
        """Decide each item against the state and replay its record into it at once (a later item sees it),
        then make them all durable in one journal append (one fsync) and publish their events. Per item,
        `result(item, record, metadata version)`, or the MetadataError that refused it."""
        with self._lock:
            self._journal.check_writable()
            results: list[int | MetadataError] = []
            written: list[tuple[int, Record]] = []
            events: list[MetadataEvent] = []
            for item in items:
                try:
                    record = decide_one(item)
                except MetadataError as e:
                    results.append(e)
                    continue
                v = self._state.version + 1
                event = replay(self._state, record, v)
                assert event is not None
                self._state.version = v
                written.append((v, record))
                events.append(event)
                results.append(result(item, record, v))
            if written:
                self._journal.append(written)
            for ev in events:  # only once durable
                self._publish(ev)
            return results

    def close(self) -> None:
        """Fold the journal into the snapshot (a cleanly stopped broker leaves one self-contained file)."""
        self._journal.close()

    # --- producer id blocks: a file of its own, like ZooKeeper's /latest_producer_id_block ---------
    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        """The block after the last one handed out, recorded (tmp, fsync, rename) before it is used."""
        if block_size <= 0:
            raise ValueError(f"producer id block size {block_size} must be positive")
        path = os.path.join(self._dir, PRODUCER_ID_BLOCK_FILE)
        with self._lock:
            try:
                with open(path, encoding="utf-8") as fh:
                    doc = json.load(fh)
                first = int(doc["block_start"]) + int(doc["block_length"])
            except FileNotFoundError:
                first = 0
            if first > 2**63 - 1 - block_size:
                raise MetadataError("producer ids are exhausted")
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "broker": self._broker_id, "block_start": first,
                           "block_length": block_size}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        return first, block_size
