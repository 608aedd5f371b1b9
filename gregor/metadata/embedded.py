"""A metadata store for a lone broker: in memory, persisted to one JSON file in the log dir.

It makes `gregor serve` work with nothing else installed, behind the same interface the
ZooKeeper store will implement. The file is rewritten atomically (tmp, fsync, rename) on
every change; changes are rare (topic admin), so simplicity beats incrementality.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from typing import Any

from gregor.metadata.store import (
    BadVersionError,
    BrokerInfo,
    MetadataError,
    MetadataStore,
    NoSuchTopicError,
    PartitionState,
    TopicExistsError,
    TopicMetadata,
)

FILE_NAME = "gregor-metadata.json"
PRODUCER_ID_BLOCK_FILE = "gregor-producer-id-block.json"


class EmbeddedMetadataStore(MetadataStore):
    def __init__(self, data_dir: str, broker_id: int) -> None:
        super().__init__()
        os.makedirs(data_dir, exist_ok=True)
        self._path = os.path.join(data_dir, FILE_NAME)
        self._broker_id = broker_id
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._cluster_id = ""
        self._load()

    # --- persistence -----------------------------------------------------------------
    def _load(self) -> None:
        if not os.path.exists(self._path):
            self._cluster_id = _new_cluster_id()
            self._save()
            return
        with open(self._path, encoding="utf-8") as fh:
            doc = json.load(fh)
        self._cluster_id = doc["cluster_id"]
        for t in doc.get("topics", []):
            parts = {int(p): PartitionState(**s) for p, s in t["partitions"].items()}
            self._topics[t["name"]] = TopicMetadata(
                t["name"], uuid.UUID(t["topic_id"]), parts, dict(t.get("configs", {})), t.get("internal", False)
            )

    def _save(self) -> None:
        doc: dict[str, Any] = {
            "version": 1,
            "cluster_id": self._cluster_id,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "internal": t.internal,
                    "configs": t.configs,
                    "partitions": {str(p): vars(s) for p, s in sorted(t.partitions.items())},
                }
                for t in self._topics.values()
            ],
        }
        tmp = self._path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)

    # --- interface -------------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def register_broker(self, info: BrokerInfo) -> None:
        self._brokers[info.broker_id] = info  # live registrations are not persisted, as with ephemeral znodes

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def controller_id(self) -> int:
        return self._broker_id if self._broker_id in self._brokers else -1

    def topics(self) -> dict[str, TopicMetadata]:
        return self._topics

    def create_topic(self, topic: TopicMetadata) -> None:
        with self._lock:
            if topic.name in self._topics:
                raise TopicExistsError(topic.name)
            self._topics[topic.name] = topic
            self._save()
        self._notify("created", topic.name)

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if self._topics.pop(name, None) is None:
                raise NoSuchTopicError(name)
            self._save()
        self._notify("deleted", name)

    def add_partitions(self, name: str, partitions: dict[int, PartitionState]) -> None:
        with self._lock:
            t = self._topics.get(name)
            if t is None:
                raise NoSuchTopicError(name)
            t.partitions.update(partitions)
            self._save()
        self._notify("partitions", name)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._lock:
            t = self._topics.get(name)
            if t is None:
                raise NoSuchTopicError(name)
            t.configs = dict(configs)
            self._save()
        self._notify("configs", name)

    def update_partition_state(self, name: str, partition: int, state: PartitionState, expected_version: int) -> int:
        with self._lock:
            t = self._topics.get(name)
            if t is None or partition not in t.partitions:
                raise NoSuchTopicError(f"{name}-{partition}")
            cur = t.partitions[partition]
            if cur.version != expected_version:
                raise BadVersionError(f"{name}-{partition}: version {cur.version}, expected {expected_version}")
            state.version = expected_version + 1
            t.partitions[partition] = state
            self._save()
        self._notify("state", name)
        return state.version


    # --- producer id blocks: a file of its own, like ZooKeeper's /latest_producer_id_block ---------
    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        """The block after the last one handed out, recorded (tmp, fsync, rename) before it is used."""
        if block_size <= 0:
            raise ValueError(f"producer id block size {block_size} must be positive")
        path = os.path.join(os.path.dirname(self._path), PRODUCER_ID_BLOCK_FILE)
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


def _new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
