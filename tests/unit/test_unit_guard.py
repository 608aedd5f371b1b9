"""The guard of tests/unit (tests/unit_guard.py): connecting, binding or starting a process fails a unit test,
even where the code under test catches the error; threads that were running before the test are not its."""

from __future__ import annotations

import os
import socket
import subprocess
import threading

import pytest

from tests.unit_guard import IsolationError, guarded, guarding


def test_this_module_is_marked_unit_and_guarded(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("integration") is None
    assert guarding() == request.node.nodeid


def test_bind_is_refused_at_the_call() -> None:
    with pytest.raises(IsolationError, match="bound a socket"), guarded("inner"), socket.socket() as s:
        s.bind(("127.0.0.1", 0))


def test_connect_is_refused_at_the_call() -> None:
    with pytest.raises(IsolationError, match=r"opened a network connection \(socket.connect: \('127.0.0.1', 9\)\)"):
        with guarded("inner"):
            socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_a_caught_refusal_still_fails() -> None:
    with pytest.raises(IsolationError, match="inner: a unit test started a subprocess"):
        with guarded("inner"):
            try:
                subprocess.run(["true"], check=False)
            except IsolationError:
                pass  # as code under test that swallows every error would


def test_processes_are_refused() -> None:
    pid = None
    with pytest.raises(IsolationError, match=r"started a subprocess \(os.system: b'true'\) \(and 1 more\)"):
        with guarded("inner"):
            with pytest.raises(IsolationError, match="started a subprocess"):
                os.system("true")
            with pytest.raises(IsolationError, match="forked the process"):
                pid = os.fork()
    assert pid is None


def test_threads_started_by_the_test_are_its_own() -> None:
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1)
        except BaseException as e:  # noqa: B036 - the thread reports whatever it met
            errors.append(e)

    with pytest.raises(IsolationError), guarded("inner"):
        t = threading.Thread(target=connect)
        t.start()
        t.join()
    assert len(errors) == 1 and isinstance(errors[0], IsolationError)


def test_threads_running_before_the_test_are_not() -> None:
    go, done = threading.Event(), threading.Event()
    outcome: list[object] = []

    def bind_later() -> None:
        go.wait()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 0))  # the guarded test did not start this thread: not its doing
                outcome.append("bound")
            except BaseException as e:  # noqa: B036
                outcome.append(e)
        done.set()

    t = threading.Thread(target=bind_later)
    t.start()
    with guarded("inner"):
        go.set()
        assert done.wait(10)
    t.join()
    assert outcome == ["bound"]


def test_a_failure_after_a_refusal_is_reported_as_the_refusal() -> None:
    with pytest.raises(IsolationError, match="inner: a unit test started a subprocess") as info:
        with guarded("inner"):
            try:
                subprocess.run(["true"], check=False)
            except IsolationError:
                pass
            raise AssertionError("the broker did not start")  # what such a test then says
    assert isinstance(info.value.__cause__, AssertionError)
