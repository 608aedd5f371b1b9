"""Moving a partition's log to another log dir of the same broker (AlterReplicaLogDirs, JBOD).

Kafka's way, in our words: the move creates a *future* replica in the destination dir,
`<topic>-<partition>.<uuid>-future`, that one background thread (Kafka's ReplicaAlterLogDirsThread,
here `LogMover`) fills by reading the current log and appending what it reads as a follower would
(same offsets, epochs, producer state), paced at `replica.alter.log.dirs.io.max.bytes.per.second`.
Once it has caught up with the current log's end, the swap runs where no append can come in between
(the broker's event loop; `on_caught_up` asks for it): the last batches are copied, the future log is
fsynced and closed, and the directories are renamed:

    1. `<topic>-<p>.<uuid>-future`  ->  `<topic>-<p>.<uuid>-moved`    (the copy is complete)
    2. the current `<topic>-<p>`      ->  `<topic>-<p>.<uuid>-delete`  (then removed)
    3. `<topic>-<p>.<uuid>-moved`   ->  `<topic>-<p>`                 (in the destination dir)

each followed by an fsync of its parent dir, and the moved log is opened in its new place. A crash
never loses data: before (1) the current log is intact and a `-future` dir is a copy in progress,
which the next start throws away and begins again (`LogManager` restarts every move it finds); after
(1) the `-moved` dir is complete and wins: the next start removes the current log if it is still
there and finishes (3). Until the swap the current log serves every read and write.

Names: a future dir's name holds the whole topic name (no cut, unlike a deletion's); a topic too long
for that (NAME_MAX, 255 bytes) cannot be moved (KAFKA_STORAGE_ERROR).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gregor.storage.checkpoint import TopicPartition
from gregor.storage.config import LogConfig
from gregor.storage.dir_failure import LogDirFailureChannel
from gregor.storage.errors import (
    KafkaStorageError,
    LogDirNotFoundError,
    LogNotLoadedError,
    LogOfflineError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from gregor.storage.files import fsync_dir
from gregor.storage.log import Log
from gregor.storage.log_dirs import FUTURE_DIR_SUFFIX, MOVED_DIR_SUFFIX, remove_log_dir
from gregor.storage.log_table import LogTable
from gregor.storage.segment_files import SegmentFileCache

logger = logging.getLogger(__name__)

# One read of the current log copies at most this much (bounded further by the rate: a slow rate copies
# in small steps, never a burst of a whole chunk).
COPY_CHUNK_BYTES = 1 << 20
NAME_MAX = 255
# Replicas not on this broker yet that AlterReplicaLogDirs placed on a dir: at most this many are remembered.
PREFERRED_DIRS_MAX = 10_000
LONG_MAX = 2**63 - 1


def future_dir(dest: str, topic: str, partition: int) -> str:
    name = f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
    if len(name.encode()) > NAME_MAX:
        raise KafkaStorageError(f"the topic name {topic!r} is too long for a future replica's directory name")
    return os.path.join(dest, name)


@dataclass
class Move:
    """One partition's move under way: its future log in `dest`."""

    tp: TopicPartition
    dest: str
    future: Log
    swap_asked: bool = False  # caught up: the swap is queued where appends cannot interleave
    generation: int = -1  # the current log's truncation count when the copy (re)started


class MoveHost(Protocol):
    """What the mover needs of the LogManager that owns it."""

    def maybe_fail_dir(self, log_or_dir: Log | str, error: BaseException) -> bool: ...

    def topic_config(self, topic: str) -> LogConfig: ...

    def get_or_create_log(self, topic: str, partition: int) -> Log: ...


class LogMover:
    """The future replicas of one LogManager and the thread that fills them. Works on the manager's
    LogTable (its lock guards the moves too) and log dirs; `host` is the manager (an I/O error fails a
    log dir, a moved log gets its topic's config); `files` is the broker's open-files cache."""

    def __init__(self, table: LogTable, dirs: LogDirFailureChannel, host: MoveHost, files: SegmentFileCache) -> None:
        self.table = table
        self._dirs = dirs
        self._host = host
        self._files = files
        self.moves: dict[TopicPartition, Move] = {}
        # AlterReplicaLogDirs for a replica not here yet (a reassignment's new replica): where to create it
        # (Kafka's preferred log dir), forgotten once used. Bounded: one entry per partition asked about.
        self._preferred: dict[TopicPartition, str] = {}
        # replica.alter.log.dirs.io.max.bytes.per.second: read at each step, so a new value applies at once.
        self.rate_bytes_per_s: int = LONG_MAX
        # Called (on the mover thread) with a partition whose future log caught up: the server runs
        # `swap(tp)` on its event loop. None: the mover swaps itself (no appends can interleave then).
        self.on_caught_up: Callable[[TopicPartition], None] | None = None
        self._wake = threading.Event()  # a new move to copy
        self._stop = threading.Event()  # shutdown: ends the pacing waits too
        # Held while a future log is written (`_copy_step`) and while one is closed and removed (`abort`).
        # Lock order: the table's lock, then this one; nothing under this one takes the table's.
        self._copy_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- starting and abandoning moves ------------------------------------------------------------

    def alter_log_dir(self, tp: TopicPartition, dest: str) -> None:
        """LogManager.alter_log_dir: a move of the partition's log to log dir `dest`, or for a replica
        not here yet, the dir to create it in when it comes (`take_preferred`)."""
        dest = os.path.abspath(dest)
        if dest not in self._dirs.log_dirs:
            raise LogDirNotFoundError(f"{dest} is not a log dir of this broker")
        if dest in self._dirs.offline_dirs:
            raise LogOfflineError(f"log dir {dest} is offline")
        table = self.table
        with table.lock:
            if table.closed:
                raise StorageError("the log manager is shut down")
            if tp in table.pending:
                raise LogNotLoadedError(f"the log of {tp[0]}-{tp[1]} is still loading")
            if tp in table.offline:
                raise LogOfflineError(f"the log of {tp[0]}-{tp[1]} is offline: {table.offline[tp]}")
            if tp not in table.logs and tp not in table.lazy:
                # Created there when it comes (Kafka's preferred log dir); the tool asks again until it is here.
                self._preferred.pop(tp, None)
                self._preferred[tp] = dest
                while len(self._preferred) > PREFERRED_DIRS_MAX:  # the oldest wishes go first
                    del self._preferred[next(iter(self._preferred))]
                raise ReplicaNotAvailableError(f"{tp[0]}-{tp[1]} has no replica on this broker")
            current = self._host.get_or_create_log(*tp)  # opens a log left unopened since a clean start
            self.start_move(tp, current, dest)

    def take_preferred(self, tp: TopicPartition) -> str | None:
        """The log dir AlterReplicaLogDirs named for the partition before its replica was here, if any
        (forgotten now: the replica is being created). Table's lock held."""
        return self._preferred.pop(tp, None)

    def futures(self) -> list[Log]:
        """The future logs being filled (they count towards their dirs when placing a new log)."""
        return [m.future for m in self.moves.values()]

    def restart_moves(self, stale: list[tuple[str, TopicPartition, str]]) -> None:
        """Moves a crash or shutdown cut short during the copy (`stale`: dest dir, partition, future
        replica's directory) begin again from scratch: the stale future replica is removed (the current
        log is intact) and a new one is made."""
        for d, tp, path in stale:
            try:
                remove_log_dir(path, *tp)
                if d in self._dirs.offline_dirs or not self.table.knows(tp):
                    continue
                logger.info("%s-%d: restarting its move to %s, cut short by the last shutdown", tp[0], tp[1], d)
                self.alter_log_dir(tp, d)
            except (StorageError, OSError) as e:
                logger.error("%s-%d: cannot restart its move to %s: %s", tp[0], tp[1], d, e)

    def start_move(self, tp: TopicPartition, current: Log, dest: str) -> None:
        """A future log for `tp` in `dest`, filled from `current` in the background. Replaces a move of the
        partition to another dir; a move to the same dir goes on. Call with the table's lock held."""
        move = self.moves.get(tp)
        if move is not None:
            if move.dest == dest:
                return
            self.abort(tp, "moved elsewhere instead")
        if os.path.dirname(current.dir) == dest:
            return
        path = future_dir(dest, *tp)
        try:
            fut = Log.create_new(path, current.config, files=self._files)
            if current.log_start_offset > 0:
                fut.truncate_fully_and_start_at(current.log_start_offset)
            fsync_dir(dest)
        except OSError as e:
            raise KafkaStorageError(f"cannot create the future replica {path}: {e}") from e
        self.moves[tp] = Move(tp, dest, fut)
        logger.info("%s-%d: moving from %s to %s (future replica %s)", tp[0], tp[1], os.path.dirname(current.dir),
                    dest, os.path.basename(path))
        self._ensure_thread()
        self._wake.set()

    def abort(self, tp: TopicPartition, why: str, remove: bool = True) -> None:
        """Drop the partition's future log (its files removed, unless its dir failed). Table's lock held."""
        move = self.moves.pop(tp, None)
        if move is None:
            return
        logger.info("%s-%d: move to %s abandoned: %s", tp[0], tp[1], move.dest, why)
        with self._copy_lock:  # a copy step under way finishes its append first
            try:
                move.future.close()
            except StorageError:
                pass
            if remove:
                try:
                    remove_log_dir(move.future.dir, *tp)
                except OSError as e:
                    logger.warning("cannot remove %s: %s", move.future.dir, e)

    def abort_in_dir(self, d: str) -> None:
        """Every future log in the failed dir `d`, and of every current log there. Table's lock held."""
        for tp, move in list(self.moves.items()):
            current = self.table.get(tp)
            if move.dest == d:
                self.abort(tp, f"log dir {d} failed", remove=False)
            elif current is None or os.path.dirname(current.dir) == d:
                self.abort(tp, f"the current log's dir {d} failed")

    def future_replicas(self) -> dict[str, dict[TopicPartition, tuple[int, int]]]:
        """Per destination dir, each future log's (size in bytes, offset lag behind the current log)."""
        out: dict[str, dict[TopicPartition, tuple[int, int]]] = {}
        with self.table.lock:
            moves = list(self.moves.values())
        for m in moves:
            current = self.table.get(m.tp)
            leo = current.log_end_offset if current is not None else m.future.log_end_offset
            out.setdefault(m.dest, {})[m.tp] = (m.future.size_bytes, max(0, leo - m.future.log_end_offset))
        return out

    # --- the copying thread ------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="replica-alter-log-dirs", daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        """Stop copying (the future logs are closed by the manager, and the next start begins again)."""
        self._stopping = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stopping:
            with self.table.lock:
                todo = [m for m in self.moves.values() if not m.swap_asked]
            if not todo:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            for move in todo:
                if self._stopping:
                    return
                try:
                    caught_up = self._copy_step(move)
                except StorageError as e:
                    logger.error("%s-%d: copying to %s failed: %s", move.tp[0], move.tp[1], move.dest, e)
                    with self.table.lock:
                        if self.moves.get(move.tp) is move:
                            self.abort(move.tp, str(e), remove=False)
                    self._host.maybe_fail_dir(move.dest, e)
                    continue
                except Exception:  # a bug must not end the thread: the move is dropped, the log stays
                    logger.exception("%s-%d: copying to %s failed", move.tp[0], move.tp[1], move.dest)
                    with self.table.lock:
                        if self.moves.get(move.tp) is move:
                            self.abort(move.tp, "an unexpected error")
                    continue
                if caught_up:
                    try:
                        self._caught_up(move)
                    except Exception:  # noqa: BLE001 - as above
                        logger.exception("%s-%d: the swap into %s failed", move.tp[0], move.tp[1], move.dest)

    def _copy_step(self, move: Move, rate_limited: bool = True) -> bool:
        """Copy one chunk from the current log to the future one; whether the future has caught up. The
        copy lock is held while the future log is written, so `abort` (which takes it before closing and
        removing the future log) never pulls the files from under an append."""
        with self.table.lock:
            if self.moves.get(move.tp) is not move:
                return False
            current = self.table.get(move.tp)
        if current is None:
            return False
        fut = move.future
        read_error: StorageError | None = None
        copied = 0
        with self._copy_lock:
            if self.moves.get(move.tp) is not move:  # abandoned meanwhile
                return False
            if move.generation != current.generation:
                # The current log went back (a follower truncated after a leader change) since the copy began:
                # what was copied may differ from what is there now, so the copy begins again.
                if move.generation >= 0:
                    logger.info("%s-%d: the log was truncated during its move: copying again", *move.tp)
                move.generation = current.generation
                fut.truncate_fully_and_start_at(current.log_start_offset)
            offset = fut.log_end_offset
            if offset < current.log_start_offset:  # retention or DeleteRecords moved the start past the copy
                fut.truncate_fully_and_start_at(current.log_start_offset)
                offset = fut.log_end_offset
            if offset >= current.log_end_offset:
                return True
            rate = self.rate_bytes_per_s
            # At a rate, a step copies at most a tenth of a second's worth, then waits its time out.
            chunk = COPY_CHUNK_BYTES if not rate_limited else max(1, min(COPY_CHUNK_BYTES, rate // 10))
            try:
                records = current.read(offset, chunk, min_one_batch=True).records
            except OffsetOutOfRangeError:
                return False  # the start moved meanwhile: the next step truncates
            except StorageError as e:  # the current log's trouble (closed under a deletion, or its dir failed)
                read_error, records = e, b""
            copied = len(records)
            if copied:
                try:
                    fut.append_as_follower(records)
                except UnexpectedAppendOffsetError as e:
                    if not (fut.log_end_offset == fut.log_start_offset and e.first_offset < fut.log_end_offset):
                        raise
                    # The log start falls inside the first batch (DeleteRecords): as Kafka's future replica
                    # does, start at the batch's base offset; the swap sets the log start back where it was.
                    fut.truncate_fully_and_start_at(e.first_offset)
                    fut.append_as_follower(records)
            done = fut.log_end_offset >= current.log_end_offset
        if read_error is not None:  # outside the copy lock: failing a dir takes the table's lock
            self._host.maybe_fail_dir(current, read_error)
            return False
        if rate_limited and rate < LONG_MAX and copied:
            self._stop.wait(copied / rate)  # paced: the whole copy keeps to the rate
        return done

    def _caught_up(self, move: Move) -> None:
        """Make the copy durable off the loop, then ask for the swap (or do it, without a server)."""
        try:
            move.future.flush()
        except StorageError as e:
            logger.error("%s-%d: flushing the future replica failed: %s", move.tp[0], move.tp[1], e)
            return
        with self.table.lock:
            if self.moves.get(move.tp) is not move:
                return
            move.swap_asked = True
        cb = self.on_caught_up
        if cb is not None:
            cb(move.tp)
        else:
            self.swap(move.tp)

    # --- the swap ------------------------------------------------------------------------------------

    def swap(self, tp: TopicPartition) -> Log | None:
        """Replace the current log with the caught-up future one (see the module docstring). Call where no
        append to the partition can come in between (the broker's event loop). Returns the log now serving
        the partition (the moved one; the current one again if the swap failed before the copy was
        complete), or None if the move is gone."""
        table = self.table
        with table.lock:
            move = self.moves.get(tp)
            current = table.get(tp)
            if move is None or current is None:
                return None
            fut = move.future
            try:
                stalled = 0
                while fut.log_end_offset < current.log_end_offset:  # what came in since it caught up
                    before = fut.log_end_offset
                    self._copy_step(move, rate_limited=False)
                    stalled = stalled + 1 if fut.log_end_offset <= before else 0
                    if stalled >= 3:  # abandoned, or the current log went away or failed: never spin on the loop
                        raise KafkaStorageError("the copy made no progress during the swap")
                fut.update_high_watermark(current.high_watermark)
                if current.log_start_offset > fut.log_start_offset:
                    fut.delete_records(current.log_start_offset)
                for e in current.leader_epoch_cache.entries():
                    fut.leader_epoch_cache.assign(e.epoch, e.start_offset)
                fut.flush()
                fut.close()
                moved = fut.dir[: -len(FUTURE_DIR_SUFFIX)] + MOVED_DIR_SUFFIX
                os.rename(fut.dir, moved)
                fsync_dir(move.dest)
            except (StorageError, OSError) as e:
                logger.error("%s-%d: the move to %s failed before the swap (%s); the log stays in %s", tp[0], tp[1],
                             move.dest, e, os.path.dirname(current.dir))
                self.abort(tp, str(e))
                self._host.maybe_fail_dir(move.dest, e)
                return current
            del self.moves[tp]
            hw, start = current.high_watermark, current.log_start_offset
            current.close()
            table.logs.pop(tp, None)
            old_dir = current.dir
            final = os.path.join(move.dest, f"{tp[0]}-{tp[1]}")
            try:
                doomed = remove_log_dir(old_dir, *tp, remove=False)
                os.rename(moved, final)
                fsync_dir(move.dest)
                new = Log.open(final, self._host.topic_config(tp[0]), recovery_point=fut.log_end_offset,
                               log_start_offset=start, clean_shutdown=True, files=self._files)
            except (StorageError, OSError) as e:
                # The copy is complete and durable (`-moved`): the next start finishes the move.
                logger.error("%s-%d: the swap into %s failed (%s); the partition is offline until a restart "
                             "finishes the move", tp[0], tp[1], move.dest, e)
                table.offline[tp] = f"the move to {move.dest} failed: {e}"
                return None
            new.update_high_watermark(hw)
            table.logs[tp] = new
        # The old copy goes on a thread of its own: removing a large log takes a while.
        threading.Thread(target=shutil.rmtree, args=(doomed, True), name="remove-moved-log", daemon=True).start()
        logger.info("%s-%d: moved to %s (log end offset %d)", tp[0], tp[1], move.dest, new.log_end_offset)
        return new
