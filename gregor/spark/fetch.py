"""Executor side of the source: read exactly one offset range of one partition as Arrow batches.

This is the hot path, and it is gregor.client's Arrow reader: Fetch requests straight to the
partition's leader (or, with kafka.client.rack, to a replica in the same rack), record batches
decoded in C into Arrow buffers, handed to Spark as RecordBatches of the source's exact schema. No
Python object is made per record, and no consumer either: a Spark task never joins a group or
commits, because Spark's checkpoint holds the offsets. Ranges are exact, so a retried task reads the
very same records.

`read_range` is the one function every read goes through: whatever is done to the rows per batch
(typed decoding of keys and values, say) maps over what it yields.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gregor.spark.errors import GregorSourceError, report_data_loss
from gregor.spark.ranges import OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa

    from gregor.client.errors import OffsetOutOfRangeError


_heap_frozen = False


def freeze_worker_heap() -> None:
    """Exempt what a Python worker has loaded so far (pyspark, pyarrow, this package: ~100,000 objects)
    from the cyclic garbage collector, once per process.

    PySpark's daemon runs gc.collect() after every task of a reused worker; over that heap one
    collection took 60-300 ms here, as much CPU as decoding half a million records, once per task.
    Frozen objects are only skipped by the collector: reference counting still frees them, and what
    later tasks allocate is collected as before (gc.freeze, as CPython advises for pre-forked servers).
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True


def read_range(settings: Mapping[str, Any], rng: OffsetRange, schema: pa.Schema, *,
               fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """Yield the records of `rng` in offset order as RecordBatches of `schema` (the source's Arrow schema),
    each at most arrow.batch.max.records rows.

    Offsets the log no longer holds (retention, DeleteRecords) or does not hold yet (a truncated log)
    are data loss: the read fails, or with failOnDataLoss=false says so and reads what is there. That is
    checked when the read starts (against the log's bounds) and again if records are deleted under it.
    """
    from gregor.client import ArrowReader, OffsetOutOfRangeError, ReaderError

    start, until = rng.from_offset, rng.until_offset
    where = f"{rng.topic}-{rng.partition}"
    while start < until:
        try:
            reader = ArrowReader(None, rng.topic, [rng.partition], {rng.partition: start}, {rng.partition: until},
                                 schema=schema, config=settings)
        except OffsetOutOfRangeError as e:
            start, until = _clamp(e, where, start, until, fail_on_data_loss)
            continue
        except ReaderError as e:
            raise GregorSourceError(f"Cannot read offsets {start} to {until} of {where}: {e}") from e
        with reader:
            try:
                for batch in reader:
                    yield batch
                    start = batch.column("offset")[-1].as_py() + 1
                return
            except OffsetOutOfRangeError as e:
                if e.offset >= e.log_start_offset:  # past the end: the log was truncated under the read
                    report_data_loss(fail_on_data_loss, f"{where} ends at {e.log_end_offset}, before the planned "
                                                        f"end {until}")
                    return
                report_data_loss(fail_on_data_loss, f"Offsets of {where} from {start} were deleted while reading; "
                                                    f"resuming at {e.log_start_offset}")
                start = e.log_start_offset
            except ReaderError as e:
                raise GregorSourceError(f"Reading {where} at offset {start} (up to {until}) failed: {e}") from e


def _clamp(e: OffsetOutOfRangeError, where: str, start: int, until: int, fail_on_data_loss: bool) -> tuple[int, int]:
    """The part of [start, until) the log holds, after reporting what it does not."""
    if start < e.log_start_offset:
        report_data_loss(fail_on_data_loss, f"Cannot fetch offset {start} of {where}: the earliest available offset "
                                            f"is {e.log_start_offset}")
        return e.log_start_offset, until
    report_data_loss(fail_on_data_loss, f"Cannot fetch offsets up to {until} of {where}: the latest offset is "
                                        f"{e.log_end_offset}")
    return start, min(until, e.log_end_offset)
