"""A consumer-group member run as its own process, so tests can SIGKILL it.

Usage: python -m tests.groups.worker BOOTSTRAP GROUP TOPIC MODE OUT [DELAY_MS] [EXTRA_CONF_JSON]
MODE is `alo` (process, then commit: at-least-once), `amo` (commit, then process:
at-most-once) or `auto` (enable.auto.commit). Each processed record is appended to OUT as "partition offset value" and
flushed at once, so what a killed worker processed is on disk. Assignments are logged
as "# assigned UNIX_TIME p,p,.." and revocations as "# revoked UNIX_TIME p,p,..". Exits after 6 s
without records. With {"group.protocol": "consumer"} (KIP-848) the session and heartbeat timing
belong to the broker, so the worker does not set them, and a commit refused with
STALE_MEMBER_EPOCH (the member epoch moved on while it was in flight) is retried, as Kafka's
Java consumer does.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException


def main() -> None:
    bootstrap, group, topic, mode, out = sys.argv[1:6]
    delay_s = (int(sys.argv[6]) if len(sys.argv) > 6 else 0) / 1000.0
    extra = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": mode == "auto", **extra}
    if extra.get("group.protocol") != "consumer":
        conf = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300, **conf}
    c = Consumer(conf)
    fh = open(out, "a", buffering=1)

    def on_assign(consumer: Consumer, partitions: list) -> None:
        fh.write(f"# assigned {time.time():.3f} " + ",".join(str(p.partition) for p in partitions) + "\n")

    def on_revoke(consumer: Consumer, partitions: list) -> None:
        fh.write(f"# revoked {time.time():.3f} " + ",".join(str(p.partition) for p in partitions) + "\n")

    def commit(m: object) -> None:
        for attempt in range(10):
            try:
                c.commit(message=m, asynchronous=False)
                return
            except KafkaException as e:
                if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or attempt == 9:
                    raise
                time.sleep(0.05)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 6:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            continue
        idle_since = time.monotonic()
        line = f"{m.partition()} {m.offset()} {m.value().decode()}\n"
        if mode == "amo":
            commit(m)
            fh.write(line)
        elif mode == "alo":
            fh.write(line)
            commit(m)
        else:
            fh.write(line)
        if delay_s:
            time.sleep(delay_s)
    c.close()
    fh.close()


if __name__ == "__main__":
    main()
