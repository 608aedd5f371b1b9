"""Mistakes on the command line and brokers that are not there end in one line and a non-zero exit."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.tools.cli import gregor, one_line

USAGE_ERRORS = [
    (["topics"], "exactly one of"),
    (["topics", "--create"], "--create needs --topic"),
    (["topics", "--delete"], "--delete needs --topic"),
    (["topics", "--alter", "--topic", "t"], "--alter needs"),
    (["topics", "--create", "--topic", "t", "--config", "foo"], "KEY=VALUE"),
    (["topics", "--list", "--config", "a=b"], "--config applies to"),
    (["topics", "--list", "--bogus"], "unrecognized arguments: --bogus"),
    (["topics", "--create", "--topic", "t", "--partitions", "many"], "invalid int value"),
    (["produce"], "topic is required"),
    (["produce", "a", "--topic", "b"], "two topics"),
    (["produce", "t", "--producer-property", "acks"], "KEY=VALUE"),
    (["consume", "--max-messages", "x", "t"], "invalid int value"),
    (["groups"], "exactly one of"),
    (["groups", "describe"], "needs a group"),
    (["groups", "--describe"], "needs a group"),
    (["groups", "--list", "--describe", "--group", "g"], "exactly one of"),
    (["groups", "list", "--to-earliest"], "--to-earliest does not apply to list"),
    (["groups", "reset-offsets", "g"], "exactly one of --to-earliest"),
    (["groups", "descibe", "g"], "unknown action 'descibe'"),
    (["nosuch"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "says"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], says: str) -> None:
    # A port nobody listens on: a usage error must be found before any connection is tried.
    res = gregor(*argv, "--bootstrap-server", "127.0.0.1:1") if argv[0] != "nosuch" else gregor(*argv)
    assert res.returncode == 2, res
    line = one_line(res.stderr)
    assert says in line, line
    assert res.stdout == ""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("argv", [["topics", "--list"], ["topics", "--describe", "--topic", "t"],
                                  ["groups", "list"], ["groups", "describe", "g"], ["produce", "t"],
                                  ["consume", "t"]])
def test_no_broker_is_one_line_naming_the_server(argv: list[str]) -> None:
    server = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    res = gregor(*argv, "--bootstrap-server", server, stdin="hello\n")
    assert res.returncode == 1, res
    line = one_line(res.stderr)
    assert server in line and "Connection refused" in line, line
    assert time.monotonic() - start < 10


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers: a host that is up, but no Kafka broker."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


@pytest.mark.parametrize("argv", [["topics", "--list"], ["topics", "--describe", "--topic", "t"],
                                  ["groups", "list"], ["groups", "describe", "g"], ["consume", "t"]])
def test_silent_server_times_out_in_one_line(silent_server: str, argv: list[str]) -> None:
    start = time.monotonic()
    res = gregor(*argv, "--bootstrap-server", silent_server, "--request-timeout-ms", "1500")
    elapsed = time.monotonic() - start
    assert res.returncode == 1, res
    line = one_line(res.stderr)
    assert line.startswith(f"Error: no answer from the broker at {silent_server} within 1.5 s"), line
    assert elapsed < 15, elapsed


def test_help_shows_defaults() -> None:
    out = gregor("produce", "--help").stdout
    assert "(default: 127.0.0.1:9092)" in out and "(default: all)" in out and "(default: 30000)" in out
    out = gregor("consume", "--help").stdout
    assert "--follow" in out and "Ctrl-C" in out and "(default: gregor-console)" in out
    out = gregor("groups", "--help").stdout
    assert "--describe" in out and "--group" in out and "(default: 10000)" in out
    out = gregor("topics", "--help").stdout
    assert "--alter" in out and "--if-not-exists" in out
    assert "(default: info)" in gregor("serve", "--help").stdout
