"""What keeps tests/unit honest: a unit test may not open a network connection, bind a socket or start a
process (tests/conftest.py applies this to every test under tests/unit while it is set up and runs).

An audit hook (PEP 578, `sys.addaudithook`) sees every socket connect, bind and sendto and every process
start the interpreter makes, whichever library makes it. While a unit test is guarded, such an event from
its thread, or from a thread started since, raises IsolationError at the call and is recorded, and the
test fails at the end even if the code under test caught the error. Threads that were already running
(an earlier integration test's client reconnecting) are not the test's doing and pass. Outside a guarded
test the hook returns at once.

Not seen: what C libraries do on their own sockets (librdkafka's, kazoo's and uvloop's are not the
interpreter's): a unit test has no client, no ZooKeeper and no uvloop to begin with.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Audit events (https://docs.python.org/3/library/audit_events.html) and what they mean here.
GUARDED_EVENTS = {
    "socket.connect": "opened a network connection",  # connect() and connect_ex()
    "socket.bind": "bound a socket",
    "socket.sendto": "sent a datagram",
    "subprocess.Popen": "started a subprocess",
    "os.system": "started a subprocess",
    "os.posix_spawn": "started a process",
    "os.spawn": "started a process",
    "os.exec": "replaced the process",
    "os.fork": "forked the process",
    "os.forkpty": "forked the process",
}


class IsolationError(RuntimeError):
    """A unit test reached the network or started a process."""


class _Guard:
    def __init__(self) -> None:
        self.test: str | None = None  # the guarded test's node id, while it is guarded
        self.exempt_threads: frozenset[int] = frozenset()
        self.violations: list[str] = []

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        if self.test is None:
            return
        what = GUARDED_EVENTS.get(event)
        if what is None or threading.get_ident() in self.exempt_threads:
            return
        detail = f"{what} ({_describe(event, args)})"
        self.violations.append(detail)
        raise IsolationError(f"a unit test {detail}: unit tests (tests/unit) use no sockets and no processes; "
                             "a test that needs them is an integration test and lives outside tests/unit")


def _describe(event: str, args: tuple[object, ...]) -> str:
    if event.startswith("socket."):
        shown = args[1:]  # args[0] is the socket object itself
    elif event == "subprocess.Popen":
        shown = args[1:2]  # (executable, args, cwd, env): the command line
    else:
        shown = args
    text = ", ".join(repr(a) for a in shown)[:200]
    return f"{event}: {text}" if text else event


_guard = _Guard()
sys.addaudithook(_guard.audit)


def guarding() -> str | None:
    """The node id of the test being guarded now, if any."""
    return _guard.test


@contextmanager
def guarded(test: str) -> Iterator[None]:
    """Guard `test` (a node id) for the duration: the body fails with IsolationError if it reached the
    network or started a process, even where the code under test caught the error raised at the call.
    Nested, the inner guard's findings are its own (the guard's own tests use that)."""
    me = threading.get_ident()
    outer = _guard.test, _guard.exempt_threads, _guard.violations
    _guard.exempt_threads = frozenset(t.ident for t in threading.enumerate() if t.ident is not None and t.ident != me)
    _guard.violations = violations = []
    _guard.test = test
    try:
        yield
    except IsolationError:
        raise
    except BaseException as e:
        if violations:  # the refused call is why it failed (a broker that "did not start"): say so first
            raise _failure(test, violations) from e
        raise
    finally:
        _guard.test, _guard.exempt_threads, _guard.violations = outer
    # The body did not raise: an IsolationError it swallowed still fails the test.
    if violations:
        raise _failure(test, violations)


def _failure(test: str, violations: list[str]) -> IsolationError:
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return IsolationError(f"{test}: a unit test {violations[0]}{more}")
