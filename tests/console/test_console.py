"""`gregor console` through a real broker, a real headless browser (Playwright driving Debian's chromium)
and real clients: pages load, the live lag chart follows a consumer that falls behind, topics created and
deleted in the page (behind the typed confirmation) show in `gregor topics --list`, the message browser
shows what a producer wrote, a message produced in the page is read back by a consumer. The JSON API is
also tested alone: its errors, its guards and config edits.

One broker, one console and one browser for the module (each test opens its own page).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from gregor.console.reader import ClusterReader
from gregor.console.server import MAX_CONNECTIONS, ConsoleServer
from tests.broker_process import BrokerProcess

try:  # a missing Playwright fails the browser tests with the fix (below), not the module's collection
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    expect = sync_playwright = None
from tests.tools.cli import gregor, popen

UI_TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose new groups rebalance at once (the lag test's consumer joins in well under a second)."""
    b = BrokerProcess(tmp_path_factory.mktemp("console-broker"), {"group.initial.rebalance.delay.ms": "0"}).start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def console(console_broker: BrokerProcess) -> Iterator[str]:
    """The console served in-process on a free port; its base URL."""
    reader = ClusterReader(console_broker.bootstrap, {}, request_timeout_s=10.0)
    server = ConsoleServer(("127.0.0.1", 0), reader)
    server.start_in_thread()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    reader.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium (Debian's package) for the module; never a browser downloaded by Playwright."""
    executable = shutil.which("chromium")
    if executable is None:  # CI installs it: a missing browser is a failure, not a skip
        pytest.fail("chromium is not installed: scripts/install.sh installs it (apt-get install chromium)")
    if sync_playwright is None:
        pytest.fail("Playwright for Python is not installed: scripts/install.sh installs the test extras "
                    "(pip install -e '.[test]')")
    expect.set_options(timeout=UI_TIMEOUT_MS)
    pw = sync_playwright().start()
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    b = pw.chromium.launch(executable_path=executable, headless=True, args=args)
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser: Any, console: str) -> Iterator[Any]:
    context = browser.new_context(base_url=console, viewport={"width": 1200, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, f"script errors in the page: {errors}"


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def call(base: str, path: str, body: Any = None, *, method: str | None = None,
         headers: dict[str, str] | None = None, raw: bytes | None = None) -> tuple[int, Any]:
    """One API request; (status, decoded JSON body)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    hdrs.update(headers or {})
    req = urllib.request.Request(base + path, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def cli_topics(b: BrokerProcess) -> list[str]:
    r = gregor("topics", "--bootstrap-server", b.bootstrap, "--list")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def producer(b: BrokerProcess) -> Producer:
    return Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})


# --- the JSON API alone ---------------------------------------------------------------------------


def test_api_cluster_topics_and_sizes(console: str, console_broker: BrokerProcess) -> None:
    status, c = call(console, "/api/cluster")
    assert status == 200
    assert c["controller"] == 0 and [b["id"] for b in c["brokers"]] == [0]
    assert c["brokers"][0]["port"] == console_broker.port
    name = topic_name("api")
    assert call(console, "/api/topics", {"name": name, "partitions": 2})[0] == 200
    p = producer(console_broker)
    for i in range(10):
        p.produce(name, value=b"x" * 100, partition=1, key=str(i).encode())
    assert p.flush(10) == 0
    status, t = call(console, f"/api/topics/{name}")
    assert status == 200
    assert [q["partition"] for q in t["partitions"]] == [0, 1]
    assert t["partitions"][1]["high_watermark"] == 10 and t["partitions"][0]["high_watermark"] == 0
    assert t["partitions"][1]["leader"] == 0 and t["partitions"][1]["isr"] == [0]
    log = sum(f.stat().st_size for f in (console_broker.data_dir / f"{name}-1").glob("*.log"))
    assert t["partitions"][1]["size"] == log > 1000  # DescribeLogDirs' size is the .log files' size
    listed = {x["name"]: x for x in call(console, "/api/topics")[1]["topics"]}
    assert listed[name]["partition_count"] == 2 and listed[name]["size"] == log


def test_api_errors_are_clear_json(console: str) -> None:
    status, e = call(console, "/api/topics/no-such-topic")
    assert (status, e["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert e["message"] == "Topic 'no-such-topic' does not exist."
    status, e = call(console, "/api/topics/no-such-topic/messages?partition=0")
    assert (status, e["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    status, e = call(console, "/api/groups/no-such-group")
    assert (status, e["error"]) == (404, "GROUP_ID_NOT_FOUND")
    status, e = call(console, "/api/nothing-here")
    assert (status, e["error"]) == (404, "NOT_FOUND")
    status, e = call(console, "/api/topics/x/messages?partition=zero")
    assert status == 400 and "'partition' must be an integer" in e["message"]
    status, e = call(console, "/api/topics", {"name": "bad name!", "partitions": 1})
    assert (status, e["error"]) == (400, "INVALID_TOPIC_EXCEPTION")
    name = topic_name("dup")
    assert call(console, "/api/topics", {"name": name})[0] == 200
    assert call(console, "/api/topics", {"name": name})[1]["error"] == "TOPIC_ALREADY_EXISTS"


def test_api_guards_on_changes(console: str, console_broker: BrokerProcess) -> None:
    name = topic_name("guard")
    assert call(console, "/api/topics", {"name": name})[0] == 200
    # Not JSON (what a cross-site form would send): refused before anything is read.
    status, e = call(console, f"/api/topics/{name}/delete", raw=b"confirm=" + name.encode(),
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, e["error"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    status, e = call(console, f"/api/topics/{name}/delete", {"confirm": "something-else"})
    assert (status, e["error"]) == (400, "CONFIRMATION_REQUIRED")
    status, e = call(console, f"/api/topics/{name}/delete")  # a GET
    assert (status, e["error"]) == (405, "METHOD_NOT_ALLOWED")
    assert name in cli_topics(console_broker)
    # A body over the limit is refused on its Content-Length, before it is read.
    conn = http.client.HTTPConnection(urlsplit(console).netloc, timeout=10)
    try:
        conn.putrequest("POST", f"/api/topics/{name}/produce")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(2 * 1024 * 1024))
        conn.endheaders()
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())["error"]) == (413, "PAYLOAD_TOO_LARGE")
    finally:
        conn.close()
    status, e = call(console, "/api/cluster", headers={"Host": "attacker.example:80"})
    assert (status, e["error"]) == (421, "MISDIRECTED_REQUEST")
    assert call(console, f"/api/topics/{name}/delete", {"confirm": name}) == (200, {"deleted": name})
    assert name not in cli_topics(console_broker)


def test_api_topic_configs_view_and_edit(console: str) -> None:
    name = topic_name("cfg")
    assert call(console, "/api/topics", {"name": name, "configs": {"cleanup.policy": "compact"}})[0] == 200
    configs = {c["name"]: c for c in call(console, f"/api/topics/{name}/configs")[1]["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"]["source"] == "DEFAULT_CONFIG"
    status, after = call(console, f"/api/topics/{name}/configs", {"set": {"retention.ms": "3600000"},
                                                                 "delete": ["cleanup.policy"]})
    assert status == 200
    configs = {c["name"]: c for c in after["configs"]}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert (configs["cleanup.policy"]["value"], configs["cleanup.policy"]["source"]) == ("delete", "DEFAULT_CONFIG")
    status, e = call(console, f"/api/topics/{name}/configs", {"set": {"retention.ms": "soon"}})
    assert (status, e["error"]) == (400, "INVALID_CONFIG")


# --- the page in a browser ------------------------------------------------------------------------


def test_pages_load(page: Any, console_broker: BrokerProcess, console: str) -> None:
    name = topic_name("pages")
    assert call(console, "/api/topics", {"name": name, "partitions": 3})[0] == 200
    page.goto("/#/brokers")
    row = page.locator("#brokers-table tr[data-broker='0']")
    row.wait_for()
    assert str(console_broker.port) in row.inner_text() and "controller" in row.inner_text()
    assert "1 broker(s)" in page.locator("#cluster-name").inner_text()
    page.click("a[data-nav='topics']")
    page.locator(f"#topics-table tr[data-topic='{name}']").wait_for()
    assert page.locator(f"#topics-table tr[data-topic='{name}'] td").nth(1).inner_text() == "3"
    page.click(f"#topics-table a[href='#/topic/{name}']")
    page.locator("#partitions-table tbody tr").nth(2).wait_for()
    assert page.locator("#configs-table tr[data-config-row='retention.ms']").count() == 1
    group = f"pages-group-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(name, 0, 0)])
        c.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    finally:
        c.close()
    page.click("a[data-nav='groups']")
    page.locator(f"#groups-table tr[data-group='{group}']").wait_for()
    page.click(f"#groups-table a[href='#/group/{group}']")
    page.locator(f"#group-partitions tr[data-tp='{name}-0']").wait_for()


def test_lag_chart_follows_a_consumer_that_falls_behind(page: Any, console_broker: BrokerProcess,
                                                        console: str) -> None:
    name = topic_name("lag")
    group = f"lag-group-{uuid.uuid4().hex[:6]}"
    assert call(console, "/api/topics", {"name": name, "partitions": 1})[0] == 200
    p = producer(console_broker)
    for i in range(5):
        p.produce(name, value=f"v{i}".encode())
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([name])
        got = 0
        deadline = time.monotonic() + 15
        while got < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == 5
        c.commit(asynchronous=False)  # caught up; from here on the consumer is idle
        page.goto(f"/#/group/{group}")
        expect(page.locator("#total-lag")).to_have_text("0")
        assert page.locator("#group-state").inner_text() == "STABLE"
        assert page.locator("#member-count").inner_text() == "1"
        chart = page.locator("#lag-chart")
        points_before = int(chart.get_attribute("data-points"))
        for i in range(25):
            p.produce(name, value=f"late-{i}".encode())
        assert p.flush(10) == 0
        expect(page.locator("#total-lag")).to_have_text("25")
        expect(chart).to_have_attribute("data-last", "25")
        assert int(chart.get_attribute("data-points")) > points_before
        assert page.locator("#lag-chart polyline").count() == 1
        # The last point sits higher (a smaller y) than the first, which was drawn at lag 0.
        coords = page.locator("#lag-chart polyline").get_attribute("points").split()
        assert float(coords[-1].split(",")[1]) < float(coords[0].split(",")[1])
        assert page.locator(f"#group-partitions tr[data-tp='{name}-0'] td.lag").inner_text() == "25"
    finally:
        c.close()


def test_create_topic_in_the_page_appears_in_gregor_topics_list(page: Any, console_broker: BrokerProcess) -> None:
    name = topic_name("made-in-console")
    page.goto("/#/topics")
    page.fill("#create-name", name)
    page.fill("#create-partitions", "2")
    page.fill("#create-configs", "retention.ms=7200000")
    page.click("#create-submit")
    assert page.locator("#create-confirm-button").is_disabled()  # not until the name is typed again
    page.fill("#create-confirm-name", name[:-1])
    assert page.locator("#create-confirm-button").is_disabled()
    page.fill("#create-confirm-name", name)
    page.click("#create-confirm-button")
    expect(page).to_have_url(re.compile(f"#/topic/{name}$"))
    page.locator("#partitions-table tbody tr").nth(1).wait_for()
    assert name in cli_topics(console_broker)
    r = gregor("topics", "--bootstrap-server", console_broker.bootstrap, "--describe", "--topic", name)
    assert "PartitionCount: 2" in r.stdout and "retention.ms=7200000" in r.stdout, r.stdout


def test_delete_topic_behind_the_confirmation(page: Any, console_broker: BrokerProcess, console: str) -> None:
    name = topic_name("doomed")
    assert call(console, "/api/topics", {"name": name})[0] == 200
    page.goto(f"/#/topic/{name}")
    page.click("#delete-start")
    page.fill("#delete-confirm-name", "doomed")
    assert page.locator("#delete-confirm-button").is_disabled()
    assert name in cli_topics(console_broker)
    page.fill("#delete-confirm-name", name)
    page.click("#delete-confirm-button")
    expect(page).to_have_url(re.compile("#/topics$"))
    page.locator("#topics-table").wait_for()
    assert page.locator(f"#topics-table tr[data-topic='{name}']").count() == 0
    assert name not in cli_topics(console_broker)


def test_message_browser_shows_key_headers_and_value(page: Any, console_broker: BrokerProcess, console: str) -> None:
    name = topic_name("browse")
    assert call(console, "/api/topics", {"name": name, "partitions": 2})[0] == 200
    p = producer(console_broker)
    p.produce(name, key=b"order-17", value=b'{"total":42,"items":["a","b"]}', partition=1,
              headers=[("trace-id", b"abc123"), ("source", b"unit-test")])
    p.produce(name, key=None, value=bytes([0, 1, 2, 255]), partition=1)
    assert p.flush(10) == 0
    page.goto(f"/#/messages?topic={name}&partition=1")
    row = page.locator("#records-table tr[data-offset='0']")
    row.wait_for()
    assert row.locator("td.key").inner_text() == "order-17"
    headers = row.locator("td.headers").inner_text()
    assert "trace-id" in headers and "abc123" in headers and "source" in headers and "unit-test" in headers
    assert row.locator("td.value").inner_text() == '{"total":42,"items":["a","b"]}'
    binary = page.locator("#records-table tr[data-offset='1']")
    assert binary.locator("td.key").inner_text() == "null"
    assert "00 01 02 ff" in binary.locator("td.value").inner_text()  # not UTF-8: shown as hex
    page.select_option("#browse-format", "json")
    assert '"total": 42' in row.locator("td.value").inner_text()
    page.select_option("#browse-format", "hex")
    assert "7b 22 74 6f" in row.locator("td.value").inner_text()  # {"to
    # From offset 1, and by timestamp (the first record at or after now + 1 h: none).
    page.select_option("#browse-from", "offset")
    page.fill("#browse-offset", "1")
    page.click("#browse-submit")
    expect(page.locator("#records-table tbody tr")).to_have_count(1)
    page.select_option("#browse-from", "timestamp")
    page.fill("#browse-offset", str(int(time.time() * 1000) + 3_600_000))
    page.click("#browse-submit")
    page.locator("#browse-empty").wait_for()


def test_produce_from_the_page_is_read_back_by_a_consumer(page: Any, console_broker: BrokerProcess,
                                                           console: str) -> None:
    name = topic_name("produced")
    assert call(console, "/api/topics", {"name": name, "partitions": 3})[0] == 200
    page.goto(f"/#/produce?topic={name}")
    page.locator("#produce-topic").wait_for()
    assert page.locator("#produce-topic").input_value() == name
    page.fill("#produce-partition", "2")
    page.fill("#produce-key", "user-9")
    page.fill("#produce-headers", "origin=console\nattempt=1")
    page.fill("#produce-value", '{"hello": "from the console"}')
    page.click("#produce-submit")
    offset = int(page.locator("#produce-offset").inner_text())
    c = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": "readback", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(name, 2, offset)])
        msg = None
        deadline = time.monotonic() + 10
        while msg is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                msg = m
    finally:
        c.close()
    assert msg is not None
    assert (msg.key(), msg.value()) == (b"user-9", b'{"hello": "from the console"}')
    assert msg.headers() == [("origin", b"console"), ("attempt", b"1")]
    # An unknown topic from the API: a clear error, and the topic is not auto-created by the attempt.
    missing = topic_name("missing")
    status, e = call(console, f"/api/topics/{missing}/produce", {"value": "x"})
    assert (status, e["error"], e["message"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION", f"Topic '{missing}' does not exist.")
    assert missing not in cli_topics(console_broker)


def test_static_files_only_from_the_console_folder(console: str) -> None:
    with urllib.request.urlopen(console + "/", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
        html = resp.read().decode()
    assert "/app.js" in html and "http" not in html.replace("http-equiv", "")  # no CDN: works offline
    status, e = call(console, "/%2e%2e/server.py")
    assert status == 404


def test_connections_are_bounded(console: str) -> None:
    """MAX_CONNECTIONS idle connections hold their threads; the next one is closed at once, and the console
    serves again when they go."""
    port = int(console.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(
                1 for t in threading.enumerate() if t.name.startswith("console-conn")) < MAX_CONNECTIONS:
            time.sleep(0.05)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        with extra:
            extra.sendall(b"GET /api/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert extra.recv(100) == b""  # closed without an answer
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            status, body = call(console, "/api/cluster")
            break
        except (ConnectionError, OSError):
            assert time.monotonic() < deadline, "the console did not serve again"
            time.sleep(0.1)
    assert status == 200 and body["brokers"]


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_gregor_console_command_on_a_sasl_listener(tmp_path: Path, start_broker: Any) -> None:
    """The real `gregor console` command, its client properties from --command-config: every request,
    DescribeLogDirs included, authenticates (this listener refuses anything else)."""
    b = start_broker({"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                      "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                      "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                      "sasl.jaas.config": PLAIN_JAAS})
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="alice" password="alice-secret";\n')
    proc = popen("console", "--bootstrap-server", b.bootstrap_of("SASL_PLAINTEXT"), "--port", "0",
                 "--command-config", str(props))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        base = m.group(1)
        assert call(base, "/api/topics", {"name": "secured", "partitions": 1})[0] == 200
        status, r = call(base, "/api/topics/secured/produce", {"key": "k", "value": "over SASL"})
        assert status == 200 and r["offset"] == 0
        status, t = call(base, "/api/topics/secured")
        assert status == 200 and t["partitions"][0]["size"] > 0 and t["partitions"][0]["high_watermark"] == 1
        status, msgs = call(base, "/api/topics/secured/messages?partition=0&offset=0")
        assert [r["value"]["text"] for r in msgs["records"]] == ["over SASL"]
    finally:
        proc.terminate()
        proc.wait(10)
