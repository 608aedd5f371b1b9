"""Screenshots of `gregor console` for the README (docs/images/console-*.png).

    .venv/bin/python scripts/console_screenshots.py [--out docs/images]

Starts a broker of its own (a temporary data dir, a free port), fills it with a few demo topics,
a consumer group that falls behind, and records with keys, headers and JSON values, serves the
console in-process and photographs three views with headless chromium (Debian's package, through
Playwright; nothing is downloaded). Everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from gregor.console.reader import ClusterReader  # noqa: E402
from gregor.console.server import ConsoleServer  # noqa: E402
from gregor.tools.local_broker import BrokerProcess  # noqa: E402

VIEWPORT = {"width": 1200, "height": 720}
LAG_SECONDS = 24  # how long the chart records the group falling behind before its picture


def fill(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("orders", 6, 1, config={"retention.ms": "604800000"}), NewTopic("payments", 3, 1),
              NewTopic("clickstream", 12, 1, config={"compression.type": "zstd"}),
              NewTopic("customers", 3, 1, config={"cleanup.policy": "compact"})]
    for f in admin.create_topics(topics).values():
        f.result(10)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    rnd = random.Random(7)
    for i in range(600):
        order = {"order_id": 1000 + i, "customer": f"c-{rnd.randrange(40):03d}", "total": round(rnd.uniform(5, 300), 2),
                 "items": rnd.randrange(1, 6), "currency": "EUR"}
        p.produce("orders", key=order["customer"].encode(), value=json.dumps(order).encode(),
                  headers=[("trace-id", f"{rnd.getrandbits(64):016x}".encode()), ("source", b"web-shop")])
    for i in range(3000):
        p.produce("clickstream", value=json.dumps({"page": f"/p/{rnd.randrange(200)}", "n": i}).encode())
    for i in range(40):
        p.produce("customers", key=f"c-{i:03d}".encode(), value=json.dumps({"name": f"Customer {i}"}).encode())
    p.flush(30)


def falling_behind(bootstrap: str, console: str, page: object) -> None:
    """A group that reads 'payments', commits, then stops while payments keep arriving."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing-service", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "client.id": "billing-1"})
    c.subscribe(["payments"])
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(50):
        p.produce("payments", value=json.dumps({"payment": i}).encode())
    p.flush(10)
    deadline = time.monotonic() + 15
    got = 0
    while got < 50 and time.monotonic() < deadline:
        m = c.poll(0.5)
        got += m is not None and m.error() is None
    c.commit(asynchronous=False)
    page.goto(f"{console}/#/group/billing-service")  # type: ignore[attr-defined]
    rnd = random.Random(3)
    end = time.monotonic() + LAG_SECONDS
    while time.monotonic() < end:  # a burst that grows, then some catching up
        for _ in range(rnd.randrange(5, 40)):
            p.produce("payments", value=b'{"payment": "late"}')
        p.flush(5)
        if time.monotonic() > end - 8:  # the consumer wakes up and works through part of its backlog
            for _ in range(120):
                c.poll(0.01)
            c.commit(asynchronous=False)
        time.sleep(1)
    page.wait_for_timeout(1500)  # type: ignore[attr-defined]
    c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "images"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed (scripts/install.sh test installs it)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), {"group.initial.rebalance.delay.ms": "0"}).start()
        reader = ClusterReader(broker.bootstrap)
        server = ConsoleServer(("127.0.0.1", 0), reader)
        server.start_in_thread()
        console = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            fill(broker.bootstrap)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                             args=["--no-sandbox"] if os.geteuid() == 0 else [])
                page = browser.new_page(viewport=VIEWPORT)
                falling_behind(broker.bootstrap, console, page)
                page.screenshot(path=str(out / "console-group-lag.png"))
                page.goto(f"{console}/#/topics")
                page.locator("#topics-table tr[data-topic='orders']").wait_for()
                page.screenshot(path=str(out / "console-topics.png"))
                page.goto(f"{console}/#/messages?topic=orders&partition=0&offset=0&limit=12")
                page.locator("#records-table").wait_for()
                page.select_option("#browse-format", "json")
                page.screenshot(path=str(out / "console-messages.png"))
                browser.close()
        finally:
            server.shutdown()
            server.server_close()
            reader.close()
            broker.kill()
    for f in sorted(out.glob("console-*.png")):
        print(f"{f} {f.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
