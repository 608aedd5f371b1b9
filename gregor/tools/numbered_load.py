"""A numbered load and its check: what the cluster tests and the fault campaign prove "nothing acknowledged
lost" with. `NumberedLoad` sends the numbers 0..count-1 and records every acknowledgement; `read_back` reads
every partition up to its high watermark; `check_acked` compares the two (lost, duplicated, out of order,
gaps)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Acked:
    """One acknowledged record: its number, partition and the offset the leader gave it."""

    seq: int
    partition: int
    offset: int


class NumberedLoad:
    """A confluent-kafka producer sending the numbers 0..count-1 (value = the number in ASCII) to
    `partition = seq % partitions`, in a thread; it records every acknowledgement and every error
    its delivery reports carry. `rate` (records/s, 0 = as fast as it goes) keeps a load running
    across a fault instead of finishing before it."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, count: int, config: dict[str, Any] | None = None,
                 rate: float = 0.0) -> None:
        import threading

        self.bootstrap, self.topic, self.partitions, self.count, self.rate = bootstrap, topic, partitions, count, rate
        self.config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0,
                       "message.timeout.ms": 120_000, **(config or {})}
        self.acked: list[Acked] = []
        self.errors: list[tuple[int, str]] = []
        self.sent = 0
        self.done = threading.Event()
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.exception: BaseException | None = None

    def start(self) -> NumberedLoad:
        self._thread.start()
        return self

    def _on_delivery(self, err: Any, msg: Any) -> None:
        seq = int(msg.value())
        if err is not None:
            self.errors.append((seq, f"{err.name()}: {err.str()}"))
        else:
            self.acked.append(Acked(seq, msg.partition(), msg.offset()))

    def _run(self) -> None:
        from confluent_kafka import Producer

        try:
            p = Producer(self.config)
            t0 = time.monotonic()
            for seq in range(self.count):
                if self.stopping.is_set():
                    break
                if self.rate:
                    ahead = t0 + seq / self.rate - time.monotonic()
                    if ahead > 0:
                        p.poll(ahead)
                while True:
                    try:
                        p.produce(self.topic, str(seq).encode(), partition=seq % self.partitions,
                                  on_delivery=self._on_delivery)
                        break
                    except BufferError:
                        p.poll(0.05)
                self.sent = seq + 1
                p.poll(0)
            while p.flush(1.0) > 0:
                pass
        except BaseException as e:  # reported by join()
            self.exception = e
        finally:
            self.done.set()

    def acked_count(self) -> int:
        return len(self.acked)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"producer still running after {timeout_s:g} s "
                               f"(sent {self.sent}, acked {len(self.acked)}, errors {len(self.errors)})")
        if self.exception is not None:
            raise self.exception


def read_back(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict[int, list[tuple[int, int]]]:
    """Every record of every partition from offset 0 up to its high watermark, as (offset, number),
    read by a confluent-kafka consumer with assigned partitions (no group)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "gregor-read-back", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "log_level": 0, "enable.partition.eof": True})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in range(partitions)}
        out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        todo = {p for p in range(partitions) if ends[p] > 0}
        c.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is not None:
                    continue  # partition EOF and transient errors: the offsets decide when a partition is done
                p = m.partition()
                out[p].append((m.offset(), int(m.value())))
                if m.offset() + 1 >= ends[p]:
                    todo.discard(p)
        if todo:
            raise TimeoutError(f"read back: partitions {sorted(todo)} short of their high watermarks {ends} "
                               f"after {timeout_s:g} s")
        return out
    finally:
        c.close()


@dataclass
class CheckResult:
    """What `check_acked` found: acknowledged records missing from their offset (lost), numbers read
    more than once (duplicated), acknowledged numbers whose offsets do not follow their order in a
    partition (out of order) and gaps among the offsets read (a consumer skipping records)."""

    acked: int
    read: int
    lost: list[Acked] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    out_of_order: list[tuple[int, int]] = field(default_factory=list)
    offset_gaps: list[tuple[int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.offset_gaps)

    def summary(self) -> str:
        return (f"acked {self.acked}, read {self.read}, lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
                f"out of order {len(self.out_of_order)}, offset gaps {len(self.offset_gaps)}"
                + ("" if self.ok else f"; first lost {self.lost[:5]}, dup {self.duplicated[:5]}, "
                   f"order {self.out_of_order[:5]}, gaps {self.offset_gaps[:5]}"))


def check_acked(acked: list[Acked], read: dict[int, list[tuple[int, int]]], allow_duplicates: bool = False) -> CheckResult:
    """Every acknowledged record is read back at exactly its acknowledged offset; within a partition
    the acknowledged numbers' offsets rise with the numbers (each partition gets its numbers in
    order); offsets read are consecutive; and, unless `allow_duplicates` (a producer without
    idempotence may write a retried batch twice, legitimately), no number is read twice."""
    res = CheckResult(len(acked), sum(len(v) for v in read.values()))
    at = {(p, off): seq for p, recs in read.items() for off, seq in recs}
    for a in acked:
        if at.get((a.partition, a.offset)) != a.seq:
            res.lost.append(a)
    by_part: dict[int, list[Acked]] = {}
    for a in acked:
        by_part.setdefault(a.partition, []).append(a)
    for recs in by_part.values():
        recs.sort(key=lambda a: a.seq)
        for prev, cur in zip(recs, recs[1:], strict=False):
            if cur.offset <= prev.offset:
                res.out_of_order.append((prev.seq, cur.seq))
    for p, recs in read.items():
        for (o1, _), (o2, _) in zip(recs, recs[1:], strict=False):
            if o2 != o1 + 1:
                res.offset_gaps.append((p, o1))
    if not allow_duplicates:
        seen: set[int] = set()
        for recs in read.values():
            for _, seq in recs:
                if seq in seen:
                    res.duplicated.append(seq)
                seen.add(seq)
    return res
