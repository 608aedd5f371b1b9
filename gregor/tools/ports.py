"""Ports for the processes the local harnesses start (brokers, ZooKeeper, Raft nodes, Spark).

A harness picks a node's port before the node binds it, and a restarted node must get the same one
back. A port that was free a moment ago is only safe to hand out if nothing else will take it meanwhile:

- not an ephemeral one (`net.ipv4.ip_local_port_range`): any outgoing connection on the machine
  can be given it by the kernel, so ports are picked below that range;
- not one another picker in another process holds: parallel test workers each pick, so each
  process walks its own slice of the range. `GREGOR_PORT_SLICE=i/n` names the slice (the test
  suite sets it per xdist worker); without it a process takes a slice chosen by its pid, which
  keeps two unrelated processes apart with high probability but not certainty;
- not one this process already gave out (a node not yet started, or one stopped for a restart):
  each slice is walked in order and wraps only after hundreds of picks. A child process that
  inherits the slice starts its walk at an offset of its own (by pid), away from its parent's.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

_SPAN = 12_000  # ports below the ephemeral range that pickers walk
_lock = threading.Lock()
_next: int | None = None


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> tuple[int, int]:
    """This process's [start, end) of the range."""
    high = _ephemeral_low()
    low = max(1024, high - _SPAN)
    spec = os.environ.get("GREGOR_PORT_SLICE", "")
    try:
        index, count = (int(x) for x in spec.split("/"))
        if not 0 <= index < count:
            raise ValueError(spec)
    except ValueError:
        count = 16
        index = os.getpid() % count
    width = (high - low) // count
    return low + index * width, low + (index + 1) * width


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _take(n: int, start: int, end: int) -> int | None:
    """The first of `n` consecutive free ports from this process's cursor on, the cursor moved past them;
    None when the slice [start, end) has none. Call with `_lock` held."""
    global _next
    if _next is None or not start <= _next < end:
        _next = start + (os.getpid() * 7919) % (end - start)
    for _ in range(end - start):
        base = _next if _next + n <= end else start
        _next = start if base + n >= end else base + n
        if all(_bindable(p) for p in range(base, base + n)):
            return base
    return None


def pick_ports(n: int) -> list[int]:
    """`n` distinct ports on 127.0.0.1, free now, that no other picker hands out (see the module)."""
    start, end = _slice()
    out: list[int] = []
    with _lock:
        while len(out) < n:
            port = _take(1, start, end)
            if port is None or port in out:  # the slice went round without n free ports
                raise OSError(f"no {n} free ports in {start}..{end - 1} "
                              f"(GREGOR_PORT_SLICE={os.environ.get('GREGOR_PORT_SLICE')})")
            out.append(port)
    return out


def pick_port() -> int:
    return pick_ports(1)[0]


def pick_port_block(n: int) -> int:
    """The first of `n` consecutive ports, each as `pick_ports` would give it (for tools that take a base
    port and count up from it, such as `gregor cluster up --base-port`)."""
    start, end = _slice()
    with _lock:
        base = _take(n, start, end)
    if base is None:
        raise OSError(f"no {n} consecutive free ports in {start}..{end - 1}")
    return base
