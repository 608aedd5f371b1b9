"""Micro-benchmark of gregor.storage: appends/s and MB/s for 1 KiB and 100 KiB batches, read MB/s.

    python benchmarks/bench_storage.py [--dir DIR] [--mb 256] [--rounds 3] [--segment-mb 1024]

Records are 100-byte values. Appends reuse one pre-validated record set (so the numbers are the
storage engine's cost: offset patching, segment writes, index entries, rolls); the line
"with validation" adds `validate_record_set` (the CRC32C check the broker does per produce).
Reads walk the whole log like a catching-up consumer, one `Log.read` per fetch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from gregor.protocol.records import Record, build_batch, validate_record_set
from gregor.storage import Log, LogConfig

VALUE = b"x" * 100


def make_batch(records: int) -> bytearray:
    return bytearray(build_batch([Record(i, 1_700_000_000_000, None, VALUE) for i in range(records)]))


def bench_append(
    dir: str, records_per_batch: int, total_bytes: int, validate: bool, config: LogConfig
) -> tuple[Log, dict[str, float]]:
    log = Log.open(os.path.join(dir, f"bench-{records_per_batch}{'v' if validate else ''}-0"), config)
    buf = make_batch(records_per_batch)
    headers = validate_record_set(memoryview(buf), 1 << 30)
    n = max(1, total_bytes // len(buf))
    now = 1_700_000_000_000
    t0 = time.perf_counter()
    if validate:
        for _ in range(n):
            log.append_as_leader(buf, validate_record_set(memoryview(buf), 1 << 30), 0, now)
    else:
        for _ in range(n):
            log.append_as_leader(buf, headers, 0, now)
    elapsed = time.perf_counter() - t0
    t1 = time.perf_counter()
    log.flush()
    flush_s = time.perf_counter() - t1
    log.update_high_watermark(log.log_end_offset)
    return log, {
        "appends_per_s": n / elapsed,
        "batch_bytes": len(buf),
        "records_per_s": n * records_per_batch / elapsed,
        "mb_per_s": n * len(buf) / elapsed / 1e6,
        "flush_s": flush_s,
        "segments": log.num_segments,
    }


def append_round(dir: str, records_per_batch: int, total_bytes: int, validate: bool, config: LogConfig) -> dict[str, float]:
    log, r = bench_append(dir, records_per_batch, total_bytes, validate, config)
    log.close()
    shutil.rmtree(log.dir)
    return r


def bench_read(log: Log, max_bytes: int, records_per_batch: int, batch_bytes: int) -> dict[str, float]:
    offset, total, fetches = 0, 0, 0
    t0 = time.perf_counter()
    while offset < log.log_end_offset:
        info = log.read(offset, max_bytes, max_offset=log.high_watermark)
        total += len(info.records)
        offset = info.next_offset
        fetches += 1
    elapsed = time.perf_counter() - t0
    return {
        "fetches_per_s": fetches / elapsed,
        "mb_per_s": total / elapsed / 1e6,
        "records_per_s": total / batch_bytes * records_per_batch / elapsed,
    }


def best_of(rounds: int, fn: Callable[..., dict[str, float]], *args: Any) -> tuple[dict[str, float], float]:
    """Run `fn(*args)` `rounds` times; return (best result by the first metric, median of the first metric)."""
    results = [fn(*args) for _ in range(rounds)]
    key = next(iter(results[0]))
    ordered = sorted(results, key=lambda r: r[key])
    return ordered[-1], ordered[len(ordered) // 2][key]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--mb", type=int, default=256, help="megabytes appended per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per case; best and median are printed")
    ap.add_argument("--segment-mb", type=int, default=1024, help="segment.bytes in MiB (Kafka's default: 1024)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="gregor-bench-", dir=args.dir)
    config = LogConfig(segment_bytes=args.segment_mb << 20)
    try:
        total = args.mb * 1_000_000
        for label, per_batch in (("1 KiB", 8), ("100 KiB", 850)):
            a, median = best_of(args.rounds, append_round, root, per_batch, total, False, config)
            print(
                f"append {label:>7} batches ({a['batch_bytes']} B, {per_batch} x 100 B records): "
                f"{a['appends_per_s']:>9,.0f} appends/s (median {median:,.0f})  {a['records_per_s']:>11,.0f} records/s  "
                f"{a['mb_per_s']:>6,.0f} MB/s   (final fsync {a['flush_s'] * 1000:.0f} ms, {a['segments']} segments)"
            )
            v, median = best_of(args.rounds, append_round, root, per_batch, total, True, config)
            print(
                f"  with validate_record_set (CRC32C check) per append: {v['appends_per_s']:>9,.0f} appends/s "
                f"(median {median:,.0f})  {v['mb_per_s']:>6,.0f} MB/s"
            )
            log, a = bench_append(root, per_batch, total, False, config)
            for max_bytes in (1 << 20, 64 << 10):
                r, median = best_of(args.rounds, bench_read, log, max_bytes, per_batch, a["batch_bytes"])
                print(
                    f"  read, max_bytes {max_bytes >> 10:>5} KiB: {r['fetches_per_s']:>9,.0f} fetches/s "
                    f"(median {median:,.0f})  {r['records_per_s']:>12,.0f} records/s  {r['mb_per_s']:>6,.0f} MB/s"
                )
            log.close()
            shutil.rmtree(log.dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
