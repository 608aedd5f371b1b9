"""What the Produce path keeps between requests: one `ProduceState` per broker, created and shut down by it.

Its settings, the pool of threads that validates large record sets off the event loop
(gregor.validation.threads), each partition's validation rules (rebuilt only when its config changes),
the per-connection ordering chains that keep a connection's appends in request order while some of its
requests validate off the loop, the acks=0 tasks still running, and the test-only faults (None in
production). The handler is gregor.api.handlers.produce.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.api.faults import ProduceFaults
from gregor.configdef import Settings, setting
from gregor.protocol.validator import ValidationRules

if TYPE_CHECKING:
    from gregor.network.connection import Connection
    from gregor.replication.partition import Partition
    from gregor.storage.config import LogConfig

INLINE_EXPANSION_FACTOR = 8
"""A compressed batch validated on the event loop may expand to offload.bytes x this; past it, it
is validated again on the pool (a 64 KiB bomb must not be inflated on the loop)."""


@dataclass(frozen=True, slots=True)
class ProduceSettings(Settings):
    decompressed_max_ratio: int = setting("gregor.batch.decompressed.max.ratio")
    decompressed_max_bytes: int = setting("gregor.batch.decompressed.max.bytes")
    offload_bytes: int = setting("gregor.validation.offload.bytes")
    validation_threads: int = setting("gregor.validation.threads")


class ProduceState:
    """The Produce path's state of one broker (see the module's docstring); `shutdown` at the broker's."""

    def __init__(self, settings: ProduceSettings, faults: ProduceFaults | None = None) -> None:
        self.settings = settings
        self.faults = faults
        self.inline_budget = max(settings.offload_bytes * INLINE_EXPANSION_FACTOR, 1)
        self.pool = ThreadPoolExecutor(max_workers=settings.validation_threads, thread_name_prefix="gregor-validate")
        self._rules: weakref.WeakKeyDictionary[Partition, tuple[LogConfig, ValidationRules]] = \
            weakref.WeakKeyDictionary()
        # A connection's last Produce that validates off the loop: done once it appended (the next one waits).
        self.chains: weakref.WeakKeyDictionary[Connection, asyncio.Future[None]] = weakref.WeakKeyDictionary()
        self.tasks: set[asyncio.Future[Any]] = set()  # acks=0 tasks have no other owner until they finish

    def rules(self, part: Partition) -> ValidationRules:
        """The partition's rules, rebuilt only when its topic or log config object changes."""
        cfg = part.log.config
        got = self._rules.get(part)
        if got is not None and got[0] is cfg:
            return got[1]
        s = self.settings
        rules = ValidationRules.for_topic(
            max_message_bytes=cfg.max_message_bytes,
            decompression_ratio=s.decompressed_max_ratio,
            decompression_max_bytes=s.decompressed_max_bytes,
            compacted=cfg.compact,
            log_append_time=cfg.log_append_time,
            timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
            timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
        )
        self._rules[part] = (cfg, rules)
        return rules

    def shutdown(self) -> None:
        """At broker shutdown, once no connection is left: validations not started are dropped, running ones
        end on their own (each is bounded by the decompression limits)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
