"""Talking to brokers as a client: the broker's own inter-broker connection (broker_client), and the Arrow
reader for Python users (read_arrow, read_arrow_batches, ArrowReader; see gregor.client.arrow).

The reader's names are loaded on first use, so importing gregor.client costs nothing for the broker
and needs no pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gregor.client.arrow import ArrowReader, ByTimestamp, read_arrow, read_arrow_batches
    from gregor.client.decoder import buffer_pool_bytes
    from gregor.client.errors import (
        AuthenticationError,
        BrokerUnavailableError,
        CorruptBatchError,
        OffsetOutOfRangeError,
        ReaderError,
    )

_LAZY = {
    "ArrowReader": "gregor.client.arrow", "ByTimestamp": "gregor.client.arrow", "read_arrow": "gregor.client.arrow",
    "read_arrow_batches": "gregor.client.arrow", "ReaderError": "gregor.client.errors",
    "AuthenticationError": "gregor.client.errors", "BrokerUnavailableError": "gregor.client.errors",
    "CorruptBatchError": "gregor.client.errors", "OffsetOutOfRangeError": "gregor.client.errors",
    "buffer_pool_bytes": "gregor.client.decoder",
}
__all__ = [
    "ArrowReader", "AuthenticationError", "BrokerUnavailableError", "ByTimestamp", "CorruptBatchError",
    "OffsetOutOfRangeError", "ReaderError", "buffer_pool_bytes", "read_arrow", "read_arrow_batches",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gregor.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
