"""The replica manager: this broker's partitions, their leadership, appends, reads, HW.

It turns metadata (which partitions this broker hosts, who leads them, at what epoch)
into local logs, and serves the data path: Produce appends as leader, Fetch reads below
the high watermark. The high watermark is kept apart from the log end offset: it is the
minimum LEO over the ISR, which on a lone broker is the leader's own LEO; replication
will add follower LEOs and delayed produce without changing the callers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from gregor.config import TOPIC_PROPS, BrokerConfig
from gregor.metadata.store import MetadataStore, PartitionState, TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import BatchHeader
from gregor.server.purgatory import Purgatory
from gregor.storage.config import TOPIC_PROPERTIES, LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.replica")

def effective_topic_configs(config: BrokerConfig, overrides: dict[str, str]) -> dict[str, object]:
    """Every topic config's value for a topic: its override, else the broker default."""
    values = config.topic_defaults()
    for k, raw in overrides.items():
        tp = TOPIC_PROPS.get(k)
        if tp is not None:
            values[k] = tp.prop.parse(raw)
    return values


def log_config_for(config: BrokerConfig, overrides: dict[str, str]) -> LogConfig:
    values = effective_topic_configs(config, overrides)
    kw: dict[str, object] = {}
    for name, fld in TOPIC_PROPERTIES.items():
        v = values[name]
        kw[fld] = ",".join(v) if isinstance(v, list) else v
    return LogConfig(**kw)  # type: ignore[arg-type]


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None


class Partition:
    """One hosted partition: its log and the leader/ISR state this broker last learnt."""

    def __init__(self, topic: str, index: int, log_: Log, state: PartitionState, broker_id: int,
                 min_insync_replicas: int, compression_type: str = "producer") -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self.compression_type = compression_type  # a topic config; "producer" keeps what clients send
        self.topic_configs: dict[str, object] = {}  # every topic config's effective value (set by sync_topic)
        self.follower_log_end_offsets: dict[int, int] = {}  # filled by follower fetches (replication)
        self.apply_state(state)

    def apply_state(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.maybe_increment_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def check_leader_epoch(self, requested: int) -> None:
        """Fetch/ListOffsets v9+/v4+ carry the client's idea of the epoch; -1 means unknown."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if requested < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def append_as_leader(self, records: memoryview, headers: list[BatchHeader], required_acks: int,
                         now_ms: int) -> AppendResult:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the min.isr requirement of {self.min_insync_replicas}",
            )
        info = self.log.append_as_leader(records, headers, self.leader_epoch, now_ms)
        self.maybe_increment_high_watermark()
        return AppendResult(ErrorCode.NONE, info.first_offset, info.log_append_time_ms, info.log_start_offset)

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR (never moving back). A follower's LEO is known once it fetches;
        a lone broker's ISR is itself, so its HW is its LEO, including right after crash recovery."""
        if not self.is_leader:
            return False
        new_hw = min([self.log.log_end_offset] +
                     [self.follower_log_end_offsets.get(r, 0) for r in self.isr if r != self.broker_id])
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False


class ReplicaManager:
    def __init__(self, config: BrokerConfig, store: MetadataStore, log_manager: LogManager) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.store = store
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetch_purgatory = Purgatory()

    # --- metadata -> local state -----------------------------------------------------
    def sync_all(self) -> None:
        """Bring local partitions in line with the store (at startup and after any change)."""
        topics = self.store.topics()
        for t in topics.values():
            self.sync_topic(t)
        for (name, p) in list(self.partitions):
            t = topics.get(name)
            if t is None or p not in t.partitions:
                self.remove_partition(name, p, delete=True)

    def sync_topic(self, t: TopicMetadata) -> None:
        cfg = log_config_for(self.config, t.configs)
        effective = effective_topic_configs(self.config, t.configs)
        min_isr = int(effective["min.insync.replicas"])  # type: ignore[call-overload]
        compression_type = str(effective["compression.type"])
        for p, state in t.partitions.items():
            if self.broker_id not in state.replicas:
                continue
            key = (t.name, p)
            part = self.partitions.get(key)
            if part is None:
                lg = self.log_manager.get_or_create_log(t.name, p, cfg)
                self.partitions[key] = Partition(t.name, p, lg, state, self.broker_id, min_isr, compression_type)
                self.partitions[key].topic_configs = effective
            else:
                part.apply_state(state)
                part.min_insync_replicas = min_isr
                part.compression_type = compression_type
                part.topic_configs = effective
                if part.log.config != cfg:
                    part.log.update_config(cfg)

    def on_metadata_change(self, event: str, topic: str) -> None:
        if event == "deleted":
            for (name, p) in list(self.partitions):
                if name == topic:
                    self.remove_partition(name, p, delete=True)
            return
        t = self.store.topic(topic)
        if t is not None:
            self.sync_topic(t)

    def remove_partition(self, topic: str, p: int, delete: bool) -> None:
        part = self.partitions.pop((topic, p), None)
        if part is None:
            return
        self.fetch_purgatory.complete_all((topic, p))
        if delete:
            self.log_manager.delete_log(topic, p)

    # --- data path -------------------------------------------------------------------
    def get_partition(self, topic: str, p: int) -> Partition:
        part = self.partitions.get((topic, p))
        if part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return part

    def get_leader_partition(self, topic: str, p: int) -> Partition:
        part = self.get_partition(topic, p)
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def append(self, topic: str, p: int, records: memoryview, headers: list[BatchHeader], required_acks: int) -> AppendResult:
        part = self.get_leader_partition(topic, p)
        result = part.append_as_leader(records, headers, required_acks, int(time.time() * 1000))
        self.fetch_purgatory.on_progress((topic, p), len(records))
        return result
