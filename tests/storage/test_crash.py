"""A child process appends and flushes in a loop and is killed with SIGKILL; the log must reopen
with every batch the child reported, intact and contiguous."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading

from gregor.protocol.records import iter_records
from gregor.storage import LogConfig, LogManager, OffsetOutOfRangeError
from tests.storage.util import append, open_log, read_all

CHILD = r"""
import sys
from gregor.protocol.records import Record, build_batch, validate_record_set
from gregor.storage import LogConfig, LogManager

manager = LogManager([sys.argv[1]], LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024))
log = manager.get_or_create_log("crash.test", 0)
out = sys.stdout
i = 0
while True:
    first = log.log_end_offset
    n = 1 + i % 7
    recs = [Record(first + j, 1000 + first + j, None, str(first + j).encode() * 3) for j in range(n)]
    buf = bytearray(build_batch(recs, base_offset=first))
    info = log.append_as_leader(buf, validate_record_set(memoryview(buf), 1 << 20), 0, 0)
    out.write(f"A {info.last_offset}\n")
    if i % 10 == 9:
        log.flush()
        manager.checkpoint()
        out.write(f"F {log.recovery_point}\n")
    out.flush()
    i += 1
"""


def run_child_and_kill(log_dir: str, appends: int) -> tuple[int, int]:
    """Start the child, SIGKILL it after `appends` reported appends; (last appended, last flushed)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, log_dir], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    last_appended = last_flushed = -1
    seen = 0
    while seen < appends:
        line = proc.stdout.readline()
        assert line, f"child died: {proc.wait()}"
        kind, value = line.split()
        if kind == "A":
            last_appended, seen = int(value), seen + 1
        else:
            last_flushed = int(value)
    os.kill(proc.pid, signal.SIGKILL)
    for line in proc.stdout.read().splitlines():  # what it wrote before dying
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "A":
                last_appended = int(parts[1])
            else:
                last_flushed = int(parts[1])
    assert proc.wait() == -signal.SIGKILL
    return last_appended, last_flushed


def test_sigkill_mid_append_loses_nothing_reported(tmp_path) -> None:
    log_dir = str(tmp_path / "data")
    rng = random.Random(11)
    for _round in range(3):
        appended, flushed = run_child_and_kill(log_dir, rng.randint(200, 1500))
        manager = LogManager([log_dir], LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024))
        log = manager.get_log("crash.test", 0)
        assert log is not None
        assert log.recovery_point >= flushed  # the checkpointed recovery point survived
        assert log.log_end_offset >= appended + 1  # SIGKILL keeps the page cache: even unflushed appends
        records = read_all(log)
        assert [r.offset for r in records] == list(range(log.log_end_offset))
        for r in records:
            assert r.value == str(r.offset).encode() * 3 and r.timestamp == 1000 + r.offset
        assert log.num_segments > 1
        manager.shutdown()


def test_flush_and_retention_on_another_thread(tmp_path) -> None:
    log = open_log(tmp_path, segment_bytes=4000, retention_bytes=16000, file_delete_delay_ms=0,
                   index_interval_bytes=500)
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(job) -> None:  # type: ignore[no-untyped-def]
        while not stop.is_set():
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - reported to the main thread
                errors.append(e)
                return

    threads = [
        threading.Thread(target=worker, args=(log.flush,)),
        threading.Thread(target=worker, args=(lambda: log.delete_old_segments(now_ms=0),)),
    ]
    for t in threads:
        t.start()
    try:
        for i in range(3000):
            append(log, 1 + i % 3, value=b"c" * 40)
            log.update_high_watermark(log.log_end_offset)
            try:
                info = log.read(log.log_start_offset, 3000)
            except OffsetOutOfRangeError:
                continue  # retention moved the start between the two calls
            assert list(iter_records(bytes(info.records)))
            assert log.recovery_point <= log.log_end_offset
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert log.log_start_offset > 0 and log.size_bytes <= 16000 + 4000
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    from gregor.storage import Log

    again = Log.open(log.dir, log.config, recovery_point=0, log_start_offset=start)
    assert [r.offset for r in read_all(again)][0] >= start and again.log_end_offset == end
