"""What a log dir holds on disk, read at startup: its `<topic>-<partition>` directories, checkpoint
files and clean-shutdown marker (`scan_log_dirs`), and the opening of one log found there
(`open_found_log`). The LogManager composes these with its own state (which logs are open, pending,
lazy or offline); nothing here keeps state of its own. The marker is clean_shutdown.py's.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gregor.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    TopicPartition,
)
from gregor.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE, Plan, read_segment_sizes
from gregor.storage.config import LogConfig
from gregor.storage.errors import CorruptCheckpointError
from gregor.storage.files import fsync_dir
from gregor.storage.log import Log, parse_topic_partition
from gregor.storage.segment_files import LOG_SUFFIX, SegmentFileCache

logger = logging.getLogger("gregor.storage.log_manager")

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
MOVED_DIR_SUFFIX = "-moved"  # a future replica complete and being swapped in (log_mover.py)
STRAY_DIR_SUFFIX = "-stray"
METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)


@dataclass(slots=True)
class DirScan:
    plan: list[Plan]  # logs to load before their partitions serve: their dir was not shut down cleanly
    lazy: dict[TopicPartition, Plan]  # logs of cleanly shut down dirs: opened on first use
    pending: dict[TopicPartition, str]  # logs in `plan`, by partition: their directory
    pending_offsets: dict[str, dict[TopicPartition, int]]  # checkpoint name -> offsets of logs not open yet
    offsets: dict[str, dict[str, dict[TopicPartition, int]]]  # log dir -> checkpoint name -> offsets
    offline: dict[TopicPartition, str]  # partitions that cannot be served (duplicate directories), with why
    unclean_dirs: set[str]  # dirs holding logs whose last shutdown was not clean
    failed_dirs: dict[str, str]  # dirs that could not be read, with why: offline, as a whole
    futures: list[tuple[str, TopicPartition, str]]  # future replicas of moves cut short: (dest dir, tp, path)


def scan_log_dirs(log_dirs: list[str]) -> DirScan:
    """Find every log directory, read the checkpoints and the clean-shutdown markers (each marker is
    removed once read: from here until the next clean shutdown a crash means recovery). Cheap
    (directory listings and a few small files): runs before the broker listens."""
    pending: dict[TopicPartition, str] = {}
    pending_offsets: dict[str, dict[TopicPartition, int]] = {name: {} for name in CHECKPOINTS}
    offline: dict[TopicPartition, str] = {}
    unclean_dirs: set[str] = set()
    lazy: dict[TopicPartition, Plan] = {}
    plan: list[Plan] = []
    offsets_by_dir: dict[str, dict[str, dict[TopicPartition, int]]] = {}
    failed_dirs: dict[str, str] = {}
    futures: list[tuple[str, TopicPartition, str]] = []
    moved: list[tuple[str, TopicPartition, str]] = []
    for d in log_dirs:
        try:
            _scan_dir(d, pending, pending_offsets, offline, unclean_dirs, plan, offsets_by_dir, futures, moved)
        except (OSError, CorruptCheckpointError) as e:  # this dir fails as a whole; the others serve
            failed_dirs[d] = f"{type(e).__name__}: {e}"
            logger.error("log dir %s cannot be read (%s): it is offline", d, e)
            offsets_by_dir.pop(d, None)
            unclean_dirs.discard(d)
            plan[:] = [x for x in plan if x[0] != d]
            for tp in [tp for tp, path in pending.items() if os.path.dirname(path) == d]:
                del pending[tp]
                for name in CHECKPOINTS:
                    pending_offsets[name].pop(tp, None)
            futures[:] = [f for f in futures if f[0] != d]
            moved[:] = [m for m in moved if m[0] != d]
    for d, tp, path in moved:
        _finish_move(d, tp, path, pending, pending_offsets, offline, unclean_dirs, plan, offsets_by_dir)
    for tp in offline:
        pending.pop(tp, None)
    plan = [p for p in plan if p[1] not in offline]
    # After a clean shutdown a log needs no recovery, so it need not be opened before its partition
    # serves: it is opened by its first user (a request, or the replica manager's background work).
    # A crash before then leaves it as it was: the next start recovers from its checkpointed recovery
    # point, which the checkpoints written meanwhile keep.
    for found_log in plan:
        if found_log[3]:
            lazy[found_log[1]] = found_log
            del pending[found_log[1]]
    plan = [p for p in plan if not p[3]]
    return DirScan(plan, lazy, pending, pending_offsets, offsets_by_dir, offline, unclean_dirs, failed_dirs, futures)


def _finish_move(d: str, tp: TopicPartition, path: str, pending: dict[TopicPartition, str],
                 pending_offsets: dict[str, dict[TopicPartition, int]], offline: dict[TopicPartition, str],
                 unclean_dirs: set[str], plan: list[Plan],
                 offsets_by_dir: dict[str, dict[str, dict[TopicPartition, int]]]) -> None:
    """A move to `d` cut short after its copy was complete (`<topic>-<p>.<uuid>-moved`, log_mover.py): the
    copy wins. The current log, if still there, is removed; the copy takes the partition's name, with the
    checkpointed offsets of the dir it came from; it is recovered as after a crash."""
    try:
        prev = pending.pop(tp, None)
        if prev is not None:
            remove_log_dir(prev, *tp)
            plan[:] = [x for x in plan if x[1] != tp]
        offline.pop(tp, None)
        for offsets in offsets_by_dir.values():  # the old dir's entries (log start offset above all)
            if offsets is offsets_by_dir[d]:
                continue
            for name in CHECKPOINTS:
                if tp in offsets[name] and tp not in offsets_by_dir[d][name]:
                    offsets_by_dir[d][name][tp] = offsets[name][tp]
                    pending_offsets[name][tp] = offsets[name][tp]
        final = os.path.join(d, f"{tp[0]}-{tp[1]}")
        os.rename(path, final)
        fsync_dir(d)
    except OSError as e:
        logger.error("%s-%d: cannot finish its move to %s (%s); the partition stays offline", tp[0], tp[1], d, e)
        offline[tp] = f"a move to {d} could not be finished: {e}"
        return
    logger.warning("%s-%d: finished its move to %s, cut short by the last shutdown", tp[0], tp[1], d)
    pending[tp] = final
    plan.append((d, tp, final, False, None))
    unclean_dirs.add(d)


def _scan_dir(d: str, pending: dict[TopicPartition, str], pending_offsets: dict[str, dict[TopicPartition, int]],
              offline: dict[TopicPartition, str], unclean_dirs: set[str], plan: list[Plan],
              offsets_by_dir: dict[str, dict[str, dict[TopicPartition, int]]],
              futures: list[tuple[str, TopicPartition, str]], moved: list[tuple[str, TopicPartition, str]]) -> None:
    """One log dir's part of `scan_log_dirs`, added to its collections. Raises OSError if it cannot be read."""
    marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
    clean = os.path.exists(marker)
    sizes = read_segment_sizes(marker) if clean else {}
    offsets = {name: read_offsets(d, name) for name in CHECKPOINTS}
    offsets_by_dir[d] = offsets
    found = 0
    with os.scandir(d) as listing:  # the entry types come with the listing: no stat per log
        entries = sorted((e.name, e.path) for e in listing if e.is_dir())
    for name, path in entries:
        if name.endswith(DELETE_DIR_SUFFIX):
            logger.info("finishing the deletion of %s", path)
            shutil.rmtree(path, ignore_errors=True)
            continue
        if name.endswith((FUTURE_DIR_SUFFIX, MOVED_DIR_SUFFIX)):
            try:
                (futures if name.endswith(FUTURE_DIR_SUFFIX) else moved).append((d, parse_topic_partition(name), path))
            except ValueError:
                logger.warning("ignoring %s: not a future replica's directory", path)
            continue
        if name.endswith(STRAY_DIR_SUFFIX):
            logger.warning("ignoring %s", path)
            continue
        if name == METADATA_LOG_DIR_NAME:  # a KRaft node's metadata log: the quorum's, never a partition's
            continue
        try:
            tp = parse_topic_partition(name)
        except ValueError:
            logger.warning("ignoring %s: not a <topic>-<partition> directory", path)
            continue
        if tp in pending:
            reason = f"duplicate log directories for {tp[0]}-{tp[1]}: {path}, {pending[tp]}"
            logger.error("%s; leaving the partition offline", reason)
            offline[tp] = reason
            continue
        pending[tp] = path
        for cname in CHECKPOINTS:
            if tp in offsets[cname]:
                pending_offsets[cname][tp] = offsets[cname][tp]
        plan.append((d, tp, path, clean, sizes.get(tp) if sizes is not None else None))
        found += 1
    if not clean and (found or any(offsets.values())):
        unclean_dirs.add(d)
    if clean:  # from here until the next clean shutdown a crash means recovery
        os.unlink(marker)
        fsync_dir(d)
    if clean:
        how = "after a clean shutdown"
    elif found or any(offsets.values()):
        how = "after an unclean shutdown: logs will be recovered"
    else:
        how = "a new log dir"
    logger.info("found %d logs in %s (%s)", found, d, how)


def open_found_log(plan: Plan, offsets: dict[str, dict[TopicPartition, int]], config: LogConfig,
                   now: int, files: SegmentFileCache) -> tuple[Log | None, str]:
    """One log found by the scan: as found; if that fails, recovered from offset 0 as after a crash;
    if that fails too, (None, the reason): the partition stays offline and its files untouched."""
    _, tp, path, clean, sizes = plan
    start = offsets[LOG_START_OFFSET_CHECKPOINT].get(tp, 0)
    try:
        log = Log.open(path, config, recovery_point=offsets[RECOVERY_POINT_CHECKPOINT].get(tp, 0),
                       log_start_offset=start, now_ms=now, clean_shutdown=clean, segment_sizes=sizes,
                       files=files)
    except Exception as e:  # noqa: BLE001 - whatever it was, recovery from scratch is the answer
        logger.error("%s-%d: loading %s failed (%s: %s); recovering the whole log from offset 0",
                     tp[0], tp[1], path, type(e).__name__, e)
        try:
            log = Log.open(path, config, recovery_point=0, log_start_offset=start,
                           now_ms=now, clean_shutdown=False, files=files)
        except Exception as e2:  # noqa: BLE001
            reason = f"{type(e2).__name__}: {e2}"
            logger.error("%s-%d: the log in %s cannot be loaded (%s); the partition stays offline and its "
                         "files are left as they are", tp[0], tp[1], path, reason)
            return None, reason
    hw = offsets[REPLICATION_OFFSET_CHECKPOINT].get(tp)
    if hw is not None:
        log.update_high_watermark(hw)
    return log, ""



def logs_per_dir(log_dirs: list[str], logs: Iterable[Log]) -> dict[str, int]:
    """How many logs each log dir holds: a new log goes to the one with the fewest, as in Kafka."""
    counts = {d: 0 for d in log_dirs}
    for log in logs:
        counts[log.log_dir] = counts.get(log.log_dir, 0) + 1
    return counts


def create_log(path: str, config: LogConfig, now: int, files: SegmentFileCache) -> Log:
    """A new empty log at `path` (the caller fsyncs the parent dir); a directory left there that the
    scan did not find as a log (a creation cut short) is opened as it is instead."""
    try:
        return Log.create_new(path, config, now_ms=now, files=files)
    except FileExistsError:
        return Log.open(path, config, now_ms=now, files=files)


def remove_log_dir(path: str, topic: str, partition: int, remove: bool = True) -> str:
    """Rename a closed log's directory to `<topic>-<partition>.<uuid>-delete` (fsynced), then remove it
    (unless `remove` is false: the caller does, later): a crash in between is finished by the next scan.
    As Kafka does, the topic part is cut so the name fits NAME_MAX (255) for a 249-character topic.
    Returns the renamed path."""
    parent = os.path.dirname(path)
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    doomed = os.path.join(parent, topic[: 255 - len(suffix)] + suffix)
    os.rename(path, doomed)
    fsync_dir(parent)
    if remove:
        shutil.rmtree(doomed, ignore_errors=True)
    return doomed


def write_offsets(name: str, by_dir: Mapping[str, Mapping[TopicPartition, int]]) -> None:
    """Write the checkpoint file `name` (recovery points, log start offsets, high watermarks) of each dir."""
    for d, offsets in by_dir.items():
        OffsetCheckpointFile(os.path.join(d, name)).write(offsets)


def read_offsets(d: str, name: str) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(os.path.join(d, name)).read()
    except CorruptCheckpointError as e:
        logger.error("%s; ignoring it (logs in %s are recovered from offset 0)", e, d)
        return {}


def segment_files_size(path: str) -> int:
    """The bytes of the segment files (`*.log`) in one partition's directory, as on disk; 0 if it
    cannot be read (it vanished, or the disk failed: the log then goes offline on its first use)."""
    total = 0
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if e.name.endswith(LOG_SUFFIX) and e.is_file():
                    total += e.stat().st_size
    except OSError:
        return 0
    return total
