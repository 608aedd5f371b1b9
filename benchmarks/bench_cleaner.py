"""Benchmark of the log cleaner: MB/s cleaned, and what a clean costs concurrent appends.

    python benchmarks/bench_cleaner.py [--dir DIR] [--mb 32] [--keys 10000] [--records-per-batch 10]
                                       [--codecs none,lz4,zstd] [--segment-mb 16]

For each codec: a compacted log of `--mb` MB of keyed records (100-byte values, keys drawn
uniformly from `--keys`) is written, the active segment rolled, and `LogCleaner.clean_now` run
twice: the first clean (everything dirty: offset map over the whole log, then every segment
rewritten) and a second one (nothing dirty: the clean head re-read and its small segments
merged). MB/s counts the log bytes each clean had to go through (map pass + rewrite pass input)
per second of wall time, fsyncs included. "swap" is the longest `Log.replace_segments` call,
i.e. the longest time the cleaner held the log's lock.

Then the first clean is repeated on a fresh log while another thread appends 1 KiB batches
flat out: the appender's throughput and worst append latency, against a run without cleaner.
(Both threads share the GIL: the latency there is mostly the interpreter's 5 ms switch interval.)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import threading
import time

from gregor.protocol import compression
from gregor.protocol.records import Record, build_batch, validate_record_set
from gregor.storage import CleanerConfig, Log, LogCleaner, LogConfig

VALUE = b"x" * 100


def fill(dir: str, name: str, mb: int, keys: int, per_batch: int, codec: int, config: LogConfig) -> Log:
    log = Log.open(os.path.join(dir, f"{name}-0"), config, now_ms=0)
    rng = random.Random(1)
    target = mb * 1_000_000
    ts = 1_700_000_000_000
    while log.size_bytes < target:
        first = log.log_end_offset
        recs = [Record(first + i, ts, b"key-%d" % rng.randrange(keys), VALUE) for i in range(per_batch)]
        buf = bytearray(build_batch(recs, base_offset=first, codec=codec))
        log.append_as_leader(buf, validate_record_set(memoryview(buf), 1 << 30), 0, ts)
    log.roll(now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    return log


class SwapTimer:
    """Wraps Log.replace_segments to record how long each swap held the log."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.original = Log.replace_segments

    def __enter__(self) -> SwapTimer:
        timer = self

        def timed(log: Log, *args: object, **kw: object) -> bool:
            t0 = time.perf_counter()
            try:
                return timer.original(log, *args, **kw)  # type: ignore[arg-type]
            finally:
                timer.longest_s = max(timer.longest_s, time.perf_counter() - t0)

        Log.replace_segments = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        Log.replace_segments = self.original  # type: ignore[method-assign]


def bench_clean(dir: str, args: argparse.Namespace, codec: int, config: LogConfig) -> None:
    log = fill(dir, f"clean-{compression.NAMES[codec]}", args.mb, args.keys, args.records_per_batch, codec, config)
    before = log.size_bytes
    cleaner = LogCleaner([dir], lambda: {(log.topic, log.partition): log}, CleanerConfig())
    for label in ("first clean", "second clean"):
        with SwapTimer() as swaps:
            t0 = time.perf_counter()
            stats = cleaner.clean_now(log)
            elapsed = time.perf_counter() - t0
        processed = stats.map_bytes_read + stats.bytes_read
        print(f"  {compression.NAMES[codec]:>6} {label:>12}: {processed / 1e6:7.1f} MB in {elapsed:6.2f} s = "
              f"{processed / 1e6 / elapsed:6.1f} MB/s  ({stats.records_read / elapsed / 1e3:6.0f}k records/s "
              f"rewritten; {stats.segments_before} -> {stats.segments_after} segments; "
              f"size {before / 1e6:.1f} -> {log.size_bytes / 1e6:.2f} MB; longest swap {swaps.longest_s * 1e3:.2f} ms)")
        before = log.size_bytes
    log.close()


def appender(log: Log, stop: threading.Event, out: dict[str, float]) -> None:
    buf = bytearray(build_batch([Record(i, 0, b"k%d" % i, b"y" * 90) for i in range(10)]))
    headers = validate_record_set(memoryview(buf), 1 << 30)
    n, worst = 0, 0.0
    t0 = time.perf_counter()
    while not stop.is_set():
        a = time.perf_counter()
        log.append_as_leader(buf, headers, 0, 0)
        worst = max(worst, time.perf_counter() - a)
        n += 1
    out["appends_per_s"] = n / (time.perf_counter() - t0)
    out["worst_ms"] = worst * 1e3


def bench_concurrent(dir: str, args: argparse.Namespace, config: LogConfig) -> None:
    target = fill(dir, "concurrent", args.mb, args.keys, args.records_per_batch, compression.NONE, config)
    cleaner = LogCleaner([dir], lambda: {(target.topic, target.partition): target}, CleanerConfig())
    for with_cleaner in (False, True):
        other = Log.open(os.path.join(dir, f"appends-{int(with_cleaner)}-0"), LogConfig(), now_ms=0)
        stop, out = threading.Event(), {}
        t = threading.Thread(target=appender, args=(other, stop, out))
        t.start()
        t0 = time.perf_counter()
        if with_cleaner:
            cleaner.clean_now(target)
        else:
            time.sleep(2.0)
        elapsed = time.perf_counter() - t0
        stop.set()
        t.join()
        other.close()
        print(f"  appends {'during a clean' if with_cleaner else 'alone':>15} ({elapsed:5.2f} s): "
              f"{out['appends_per_s']:8.0f} appends/s, worst append {out['worst_ms']:.2f} ms")
    target.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    p.add_argument("--mb", type=int, default=32)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--records-per-batch", type=int, default=10)
    p.add_argument("--codecs", default="none,lz4,zstd")
    p.add_argument("--segment-mb", type=int, default=16)
    args = p.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="gregor-bench-cleaner-")
    config = LogConfig(cleanup_policy="compact", segment_bytes=args.segment_mb * 1_000_000, file_delete_delay_ms=0)
    print(f"log cleaner: {args.mb} MB per log, {args.keys} keys, {args.records_per_batch} records per batch, "
          f"100-byte values, segment.bytes {args.segment_mb} MB, in {root}")
    try:
        for name in args.codecs.split(","):
            d = os.path.join(root, name)
            os.makedirs(d, exist_ok=True)
            bench_clean(d, args, compression.BY_NAME[name], config)
        d = os.path.join(root, "concurrent")
        os.makedirs(d, exist_ok=True)
        bench_concurrent(d, args, config)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
