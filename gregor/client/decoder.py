"""The record-batch-to-Arrow decoder: the C extension where it is built, else its pure-Python twin.

Both have one interface (see gregor/client/_arrowbatch.c): `Decoder` with set_range, set_aborted,
feed, take; `scan` for the next fetch offset of a record set; `CorruptRecordError`; and the status
codes EXHAUSTED, FULL, DONE that feed returns. `C_DECODER` says which one is in use.
"""

from __future__ import annotations

from gregor.client import pydecoder

try:
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
# Either implementation's error: the fallback's class, or the extension's (a ValueError too).
CorruptRecordError: tuple[type[ValueError], ...] = (pydecoder.CorruptRecordError, _impl.CorruptRecordError)
