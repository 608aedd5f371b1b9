"""What the Produce path keeps between requests: one `ProduceState` per broker, created and shut down by it.

Its settings, the pool of threads that validates large record sets off the event loop
(gregor.validation.threads), each partition's validation rules (rebuilt only when its config changes),
the per-connection ordering chains that keep a connection's appends in request order while some of its
requests validate off the loop, the acks=0 tasks still running, the schema checks of schema-checked
topics (gregor.schema_registry.checks; None on a broker with no registry, set by the broker's
wiring once it has one), and the test-only faults (None in production). The handler is
gregor.api.handlers.produce.
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
from gregor.schema_registry.checks import SchemaPolicy, schema_policy

if TYPE_CHECKING:
    from gregor.network.connection import Connection
    from gregor.replication.partition import Partition
    from gregor.schema_registry.checks import SchemaChecks
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
        self._rules: weakref.WeakKeyDictionary[Partition, tuple[LogConfig, ValidationRules, SchemaPolicy | None]] = \
            weakref.WeakKeyDictionary()
        self.schema_checks: SchemaChecks | None = None
        # A connection's last Produce that validates off the loop: done once it appended (the next one waits).
        self.chains: weakref.WeakKeyDictionary[Connection, asyncio.Future[None]] = weakref.WeakKeyDictionary()
        self.tasks: set[asyncio.Future[Any]] = set()  # acks=0 tasks have no other owner until they finish

    def rules(self, part: Partition) -> ValidationRules:
        """The partition's rules, rebuilt only when its topic or log config object changes."""
        return self._rules_of(part)[1]

    def schema_policy(self, part: Partition) -> SchemaPolicy | None:
        """The partition's schema checks (confluent.key/value.schema.validation), None for most topics."""
        return self._rules_of(part)[2]

    def _rules_of(self, part: Partition) -> tuple[LogConfig, ValidationRules, SchemaPolicy | None]:
        cfg = part.log.config
        got = self._rules.get(part)
        if got is not None and got[0] is cfg:
            return got
        policy = schema_policy(part.topic, cfg)
        s = self.settings
        rules = ValidationRules.for_topic(
            max_message_bytes=cfg.max_message_bytes,
            decompression_ratio=s.decompressed_max_ratio,
            decompression_max_bytes=s.decompressed_max_bytes,
            compacted=cfg.compact,
            log_append_time=cfg.log_append_time,
            timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
            timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
            schema_fields=policy.fields if policy is not None else 0,
        )
        self._rules[part] = entry = (cfg, rules, policy)
        return entry

    def shutdown(self) -> None:
        """At broker shutdown, once no connection is left: validations not started are dropped, running ones
        end on their own (each is bounded by the decompression limits)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
