"""A consume-transform-produce worker with confluent-kafka transactions, run as a process the exactly-once
tests SIGKILL at random points: python -m tests.clients.eos_transformer BOOTSTRAP IN OUT GROUP TXN_ID PARTITIONS.

It reads `IN` (read_committed) from the group's committed offsets, writes `out-<value>` to `OUT` keyed by
the input's partition and offset, and commits each batch's offsets in the same transaction
(send_offsets_to_transaction). It initialises its transactions first, which aborts whatever a killed
predecessor with the same transactional id left open, then fetches the committed offsets. It exits 0
once it has seen no input for 3 s.

A transaction that takes longer than TXN_STALL_S ends the worker (faulthandler dumps its stack to stderr and
exits 1), and the test starts the next one, as after a SIGKILL. This works around a librdkafka bug
(confluentinc/librdkafka#5511 and #5456, seen with 2.16): when the broker cached as the group coordinator
leaves the Metadata (killed) and is decommissioned, send_offsets_to_transaction waits for that old broker
handle to connect, which it never does, and ignores its own timeout."""

from __future__ import annotations

import faulthandler
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

# Past every API timeout used below (30 s) with room for retries; a healthy transaction takes milliseconds.
TXN_STALL_S = 45


def main() -> None:
    bootstrap, src, dst, group, txn_id, partitions = sys.argv[1:7]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    tps = [TopicPartition(src, i) for i in range(int(partitions))]
    committed = c.committed(tps, 30)
    c.assign([TopicPartition(src, tp.partition, tp.offset if tp.offset >= 0 else -2) for tp in committed])
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 3:
        msgs = c.consume(50, 0.3)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        idle_since = time.monotonic()
        faulthandler.dump_traceback_later(TXN_STALL_S, exit=True)
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, key=f"{m.partition()}:{m.offset()}".encode(), value=b"out-" + (m.value() or b""))
        ends: dict[int, int] = {}
        for m in msgs:
            ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
        p.send_offsets_to_transaction([TopicPartition(src, q, o) for q, o in ends.items()],
                                      c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        faulthandler.cancel_dump_traceback_later()
    c.close()


if __name__ == "__main__":
    main()
