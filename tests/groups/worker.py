"""A consumer-group member run as its own process, so tests can SIGKILL it.

Usage: python -m tests.groups.worker BOOTSTRAP GROUP TOPIC MODE OUT [DELAY_MS] [EXTRA_CONF_JSON]
MODE is `alo` (process, then commit: at-least-once), `amo` (commit, then process:
at-most-once) or `auto` (enable.auto.commit). Each processed record is appended to OUT as "partition offset value" and
flushed at once, so what a killed worker processed is on disk. Assignments are logged
as "# assigned UNIX_TIME p,p,..". Exits after 6 s without records.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, group, topic, mode, out = sys.argv[1:6]
    delay_s = (int(sys.argv[6]) if len(sys.argv) > 6 else 0) / 1000.0
    extra = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": mode == "auto", "session.timeout.ms": 3000, "heartbeat.interval.ms": 300, **extra}
    c = Consumer(conf)
    fh = open(out, "a", buffering=1)

    def on_assign(consumer: Consumer, partitions: list) -> None:
        fh.write(f"# assigned {time.time():.3f} " + ",".join(str(p.partition) for p in partitions) + "\n")

    c.subscribe([topic], on_assign=on_assign)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 6:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            continue
        idle_since = time.monotonic()
        line = f"{m.partition()} {m.offset()} {m.value().decode()}\n"
        if mode == "amo":
            c.commit(message=m, asynchronous=False)
            fh.write(line)
        elif mode == "alo":
            fh.write(line)
            c.commit(message=m, asynchronous=False)
        else:
            fh.write(line)
        if delay_s:
            time.sleep(delay_s)
    c.close()
    fh.close()


if __name__ == "__main__":
    main()
