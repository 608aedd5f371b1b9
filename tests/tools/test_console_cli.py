"""`gregor produce` and `gregor consume` against real brokers: what they say matches what happened."""

from __future__ import annotations

import queue
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.tools.cli import gregor, one_line, popen


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that does not create topics on first use."""
    b = BrokerProcess(tmp_path_factory.mktemp("strict"), {"auto.create.topics.enable": "false"}).start()
    yield b
    b.kill()


def read(b: BrokerProcess, topic: str, count: int) -> list[bytes]:
    """The first `count` values of partition 0 (fewer if they do not come within 10 s)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "check"})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append(m.value())
    c.close()
    return out


def test_produce_to_missing_topic_fails_and_counts(strict: BrokerProcess) -> None:
    start = time.monotonic()
    res = gregor("produce", "nosuch", "--bootstrap-server", strict.bootstrap, "--delivery-timeout-ms", "3000",
                 stdin="a\nb\nc\n")
    assert res.returncode == 1, res
    line = one_line(res.stderr)
    assert line.startswith("Error: 3 of 3 messages failed to reach nosuch"), line
    assert time.monotonic() - start < 15


def test_produce_then_consume_with_keys_and_kafka_spellings(strict: BrokerProcess) -> None:
    assert gregor("topics", "--create", "--topic", "lines", "--partitions", "2",
                  "--bootstrap-server", strict.bootstrap).returncode == 0
    res = gregor("produce", "--topic", "lines", "--bootstrap-server", strict.bootstrap, "--key-separator", ":",
                 "--compression-codec", "zstd", "--request-required-acks", "1", stdin="k1:one\nk2:two\nk3:three\n")
    assert res.returncode == 0, res
    assert one_line(res.stderr) == "Produced 3 messages to lines."
    # Without --follow: everything there is now, from the beginning, then exit.
    start = time.monotonic()
    res = gregor("consume", "--topic", "lines", "--bootstrap-server", strict.bootstrap, "--print-key")
    assert res.returncode == 0, res
    assert sorted(res.stdout.splitlines()) == ["k1\tone", "k2\ttwo", "k3\tthree"]
    assert one_line(res.stderr) == "Processed a total of 3 messages"
    assert time.monotonic() - start < 10
    res = gregor("consume", "lines", "--bootstrap-server", strict.bootstrap, "--max-messages", "2")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 2
    # kafka-console-*.sh's --property spellings.
    res = gregor("produce", "lines", "--bootstrap-server", strict.bootstrap, "--property", "parse.key=true",
                 "--property", "key.separator=|", stdin="k4|four\n")
    assert res.returncode == 0, res
    res = gregor("consume", "lines", "--bootstrap-server", strict.bootstrap, "--property", "print.key=true",
                 "--property", "print.partition=true", "--property", "print.offset=true")
    rows = res.stdout.splitlines()
    assert len(rows) == 4 and all(re.fullmatch(r"Partition:[01]\tOffset:[0-3]\tk[1-4]\t\w+", r) for r in rows), rows
    assert sum(r.endswith("\tk4\tfour") for r in rows) == 1, rows
    res = gregor("consume", "lines", "--bootstrap-server", strict.bootstrap, "--property", "colour=red")
    assert res.returncode == 2 and "colour" in one_line(res.stderr)
    # An empty topic ends at once too.
    assert gregor("topics", "--create", "--topic", "empty", "--bootstrap-server", strict.bootstrap).returncode == 0
    res = gregor("consume", "empty", "--bootstrap-server", strict.bootstrap)
    assert res.returncode == 0 and res.stdout == "" and "total of 0" in res.stderr
    res = gregor("consume", "nosuch", "--bootstrap-server", strict.bootstrap)
    assert res.returncode == 1 and one_line(res.stderr) == "Error: Topic 'nosuch' does not exist."


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_follow_runs_until_interrupted(strict: BrokerProcess, sig: signal.Signals) -> None:
    topic = f"follow-{sig.name}"
    assert gregor("topics", "--create", "--topic", topic, "--bootstrap-server", strict.bootstrap).returncode == 0
    assert gregor("produce", topic, "--bootstrap-server", strict.bootstrap, stdin="old\n").returncode == 0
    proc = popen("consume", topic, "--follow", "--from-beginning", "--bootstrap-server", strict.bootstrap)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "old\n"
        time.sleep(1.5)  # idle: a follower keeps waiting
        assert proc.poll() is None
        assert gregor("produce", topic, "--bootstrap-server", strict.bootstrap, stdin="new\n").returncode == 0
        assert proc.stdout.readline() == "new\n"
        assert proc.poll() is None
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == "" and one_line(err) == "Processed a total of 2 messages"


def test_produce_says_how_many_failed_when_the_broker_goes_away(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    assert gregor("topics", "--create", "--topic", "t", "--bootstrap-server", b.bootstrap).returncode == 0
    proc = popen("produce", "t", "--bootstrap-server", b.bootstrap, "--delivery-timeout-ms", "2000")
    assert proc.stdin is not None
    try:
        proc.stdin.write("first\n")
        proc.stdin.flush()
        assert read(b, "t", 1) == [b"first"]
        b.kill()
        proc.stdin.write("second\nthird\n")
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    line = one_line(err)
    assert line.startswith("Error: 2 of 3 messages failed to reach t: "), line


def _lines(stream: IO[str]) -> queue.Queue[str]:
    """The lines of a child's output as they come, for reads with a timeout."""
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return q


def test_follow_survives_a_broker_restart(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    assert gregor("topics", "--create", "--topic", "t", "--bootstrap-server", b.bootstrap).returncode == 0
    proc = popen("consume", "t", "--follow", "--bootstrap-server", b.bootstrap)
    assert proc.stdout is not None and proc.stderr is not None
    lines = _lines(proc.stdout)
    try:
        # Assigned at the end of the (empty) partition: known once a record produced now arrives (a fixed
        # 1 s wait was too short on a loaded machine: "back" then came before the assignment, unseen).
        deadline = time.monotonic() + 60
        while True:
            assert gregor("produce", "t", "--bootstrap-server", b.bootstrap, stdin="first\n").returncode == 0
            try:
                assert lines.get(timeout=2) == "first\n"
                break
            except queue.Empty:
                assert time.monotonic() < deadline, "the follower got nothing"
        b.kill()
        time.sleep(2)
        assert proc.poll() is None  # a follower waits for the broker to come back
        b.restart()
        assert gregor("produce", "t", "--bootstrap-server", b.bootstrap, stdin="back\n").returncode == 0
        got = lines.get(timeout=60)
        while got == "first\n":  # a "first" produced again while the follower was being assigned
            got = lines.get(timeout=60)
        assert got == "back\n"
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lines_err = err.splitlines()
    assert re.fullmatch(r"Processed a total of \d+ messages", lines_err[-1]) and "Traceback" not in err, err
    assert 1 <= len(lines_err) <= 3 and all(ln.startswith("Warning: ") for ln in lines_err[:-1]), err  # not a flood


def test_consume_into_a_closed_pipe_ends_quietly(strict: BrokerProcess) -> None:
    assert gregor("topics", "--create", "--topic", "piped", "--bootstrap-server", strict.bootstrap).returncode == 0
    assert gregor("produce", "piped", "--bootstrap-server", strict.bootstrap, stdin="1\n2\n").returncode == 0
    proc = popen("consume", "piped", "--follow", "--from-beginning", "--bootstrap-server", strict.bootstrap)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline() == "1\n"
        proc.stdout.close()  # as `| head -1` does
        assert gregor("produce", "piped", "--bootstrap-server", strict.bootstrap, stdin="3\n").returncode == 0
        proc.wait(10)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 141 and err == "", err


def test_ctrl_c_ends_produce_input_and_delivers_what_was_read(strict: BrokerProcess) -> None:
    assert gregor("topics", "--create", "--topic", "typed", "--bootstrap-server", strict.bootstrap).returncode == 0
    proc = popen("produce", "typed", "--bootstrap-server", strict.bootstrap)
    assert proc.stdin is not None
    try:
        proc.stdin.write("typed by hand\n")
        proc.stdin.flush()
        assert read(strict, "typed", 1) == [b"typed by hand"]
        proc.send_signal(signal.SIGINT)  # a user at a terminal ends the producer this way
        proc.wait(20)  # stdin stays open: it is the signal that ends the input
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert one_line(err) == "Produced 1 messages to typed."
