"""The record-batch-to-Arrow decoder: the C extension where it is built, else its pure-Python twin.

Both have one interface (see gregor/client/_arrowbatch.c): `Decoder` with set_range, set_aborted,
feed, take; `scan` for the next fetch offset of a record set; `CorruptRecordError`; and the status
codes EXHAUSTED, FULL, DONE that feed returns. `C_DECODER` says which one is in use
(GREGOR_CLIENT_PURE_PYTHON=1 in the environment picks the pure-Python one).
"""

from __future__ import annotations

import os

from gregor.client import pydecoder

try:
    if os.environ.get("GREGOR_CLIENT_PURE_PYTHON"):  # what an install without a compiler runs (for tests)
        raise ImportError("pure Python decoder asked for")
    from gregor.client import _arrowbatch as _impl  # type: ignore[attr-defined]

    C_DECODER = True
except ImportError:  # no compiler at install time: correct, but much slower per record
    _impl = pydecoder  # type: ignore[assignment]
    C_DECODER = False

Decoder = _impl.Decoder
scan = _impl.scan
EXHAUSTED: int = _impl.EXHAUSTED
FULL: int = _impl.FULL
DONE: int = _impl.DONE


def receive_buffer(size: int) -> bytearray | memoryview:
    """A writable buffer of `size` bytes for a Fetch response: from the extension's pool of mappings
    (memory a previous read used, already faulted in), or a bytearray."""
    if C_DECODER:
        return memoryview(_impl.allocate(size))
    return bytearray(size)


def buffer_pool_bytes(max_bytes: int | None = None) -> tuple[int, int]:
    """(cap, bytes held) of the process-wide pool of freed buffer memory kept for reuse; `max_bytes` sets
    the cap (0 turns the pool off). Without the extension there is no pool: (0, 0)."""
    if C_DECODER:
        return _impl.pool_bytes(max_bytes)  # type: ignore[no-any-return]
    return 0, 0


# Either implementation's error: the fallback's class, or the extension's (a ValueError too).
CorruptRecordError: tuple[type[ValueError], ...] = (pydecoder.CorruptRecordError, _impl.CorruptRecordError)
