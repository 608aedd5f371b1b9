"""The broker's periodic jobs: retention, flushes, checkpoints, expirations, TLS store reloads and the collector.

They start once every log is loaded and stop at shutdown; a job that fails is logged and runs again at
its next interval. Each runs on the event loop, or hands its blocking part (fsync, checkpoint files) to
an executor thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from gregor.broker.interpreter import CHECK_INTERVAL_MS, CollectorSchedule
from gregor.configdef import Settings, setting
from gregor.coordinator.group.coordinator import GroupCoordinator
from gregor.coordinator.transaction.coordinator import TransactionCoordinator
from gregor.security.tls import ServerTls
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.broker")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class PeriodicSettings(Settings):
    abort_timed_out_txns_ms: int = setting("transaction.abort.timed.out.transaction.cleanup.interval.ms")
    expire_txn_ids_ms: int = setting("transaction.remove.expired.transaction.cleanup.interval.ms")
    retention_check_ms: int = setting("log.retention.check.interval.ms")
    flush_scheduler_ms: int = setting("log.flush.scheduler.interval.ms")
    hw_checkpoint_ms: int = setting("replica.high.watermark.checkpoint.interval.ms")
    offsets_retention_check_ms: int = setting("offsets.retention.check.interval.ms")
    producer_expiration_check_ms: int = setting("producer.id.expiration.check.interval.ms")
    producer_expiration_ms: int = setting("producer.id.expiration.ms")
    tls_reload_check_ms: int = setting("gregor.ssl.reload.check.interval.ms")


class PeriodicJobs:
    """The periodic jobs of one broker: `start` once the logs are loaded, `stop` at shutdown."""

    def __init__(self, settings: PeriodicSettings, log_manager: LogManager, group_coordinator: GroupCoordinator,
                 txn_coordinator: TransactionCoordinator, listener_tls: Mapping[str, ServerTls]) -> None:
        self.settings = settings
        self.log_manager = log_manager
        self.group_coordinator = group_coordinator
        self.txn_coordinator = txn_coordinator
        self.listener_tls = listener_tls
        # The garbage collector's schedule (gregor.broker.interpreter): set by the process that owns the
        # interpreter (run_broker); None leaves the collector as it is.
        self.collector: CollectorSchedule | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        s = self.settings
        self._every(s.abort_timed_out_txns_ms, self._abort_timed_out_txns)
        self._every(s.expire_txn_ids_ms, self._expire_transactional_ids)
        self._every(s.retention_check_ms, self._retention)
        # Kafka checks flush.ms every log.flush.scheduler.interval.ms (default: never); we check at
        # least every second, which also flushes rolled segments (Kafka schedules those one by one).
        flush_ms = min(s.flush_scheduler_ms, 2**31)
        self._every(max(1, min(flush_ms, 1000)), self._flush)
        self._every(s.hw_checkpoint_ms, self._checkpoint)
        self._every(s.offsets_retention_check_ms, self._expire_offsets)
        self._every(s.producer_expiration_check_ms, self._expire_producers)
        if self.listener_tls and s.tls_reload_check_ms > 0:
            self._every(s.tls_reload_check_ms, self._reload_tls)
        if self.collector is not None:
            self.collector.freeze_loaded("all logs loaded")
            self._every(CHECK_INTERVAL_MS, self._check_collector)

    def every_log_open(self, opened: int) -> None:
        """The logs a clean shutdown left closed are open now: their state joins what is frozen."""
        if self.collector is not None and opened:
            self.collector.freeze_loaded("every log open")

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000.0)
                try:
                    await job()
                except Exception:
                    log.exception("periodic job %s failed", job.__name__)

        self._tasks.append(asyncio.ensure_future(loop()))

    async def _check_collector(self) -> None:
        assert self.collector is not None
        self.collector.check()

    async def _reload_tls(self) -> None:
        for tls in self.listener_tls.values():
            tls.reload_if_changed()

    async def _retention(self) -> None:
        # On the loop thread: segment deletion (closing and renaming) changes what reads see, and it is quick.
        # Unlinking the files of segments deleted file.delete.delay.ms ago is not (~0.3 s for a 1 GiB
        # segment here): an executor thread does that, taking them from each log under its lock.
        now = _now_ms()
        self.log_manager.cleanup_logs(now, unlink_expired=False)
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.delete_expired_files, now)

    async def _flush(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.flush_dirty_logs, _now_ms())

    async def _checkpoint(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.checkpoint)

    async def _expire_offsets(self) -> None:
        self.group_coordinator.expire_offsets()

    async def _abort_timed_out_txns(self) -> None:
        self.txn_coordinator.abort_timed_out()

    async def _expire_transactional_ids(self) -> None:
        self.txn_coordinator.expire_ids()

    async def _expire_producers(self) -> None:
        # On the loop thread, where appends update the state; a dict scan per log, no I/O.
        expiration_ms, now = self.settings.producer_expiration_ms, _now_ms()
        for lg in self.log_manager.all_logs():
            lg.remove_expired_producers(now, expiration_ms)
