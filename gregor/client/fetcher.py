"""The fetch loop: exact offset ranges of a topic's partitions, read with Fetch from each partition's leader
(or the replica it names for our rack, KIP-392) and decoded into Arrow column buffers as they arrive.

One request per broker and lane is in flight at a time (a lane is a connection: a partition's range
may be split into sub-ranges read on lanes of their own, so that the broker always has the next fetch
of the partition queued while it serves one). As soon as a response is in, the next offsets are read
from its batch headers alone (`scan`) and the next Fetch goes out *before* the records are decoded,
so the broker serves the next response while this one is decoded - as long as
queued.max.messages.kbytes has room for both (the received response and the bound on the next).
Each partition's decoder keeps building rows across responses and hands over a batch of buffers when
it holds arrow.batch.max.records rows or arrow.batch.max.bytes bytes, or when its range is done.

Errors as Kafka's consumer treats them: a leader that moved (NOT_LEADER_OR_FOLLOWER, FENCED or
UNKNOWN_LEADER_EPOCH), no leader yet, a replica or disk not available (REPLICA_NOT_AVAILABLE,
KAFKA_STORAGE_ERROR), or a broker that cannot be reached: refresh the metadata and retry after a
backoff, at most `retries` times in a row per partition. OFFSET_OUT_OF_RANGE from the leader fails
the read naming the log's bounds (from a follower, the read goes back to the leader). Anything else
fails the read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gregor.client import decoder as dec
from gregor.client.cluster import EARLIEST, LATEST, RETRIABLE, Cluster, error_name
from gregor.client.connection import Connection
from gregor.client.errors import BrokerUnavailableError, CorruptBatchError, OffsetOutOfRangeError, ReaderError
from gregor.client.reader_config import ReaderConfig
from gregor.protocol.apis import BY_KEY
from gregor.protocol.compression import CorruptCompressedDataError, DecompressedTooLargeError
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct

FETCH = BY_KEY[1]
FETCH_VERSIONS = (4, 12)  # 4: isolation level and aborted transactions; 13+ names topics by id only


def as_code(code: int) -> ErrorCode | None:
    try:
        return ErrorCode(code)
    except ValueError:
        return None


@dataclass(eq=False)
class Cursor:
    """Where the read of one partition stands: the next offset to fetch, below `end`."""

    topic: str
    partition: int
    position: int
    end: int
    decoder: Any  # a gregor.client.decoder.Decoder
    lane: int = 0  # which connection to the broker: one sub-range of a partition per lane
    leader: int = -1
    leader_epoch: int = -1
    preferred: int = -1  # the replica the leader named for our rack (KIP-392), -1 for the leader itself
    failures: int = 0  # retriable failures in a row
    empty: int = 0  # answers without a complete batch in a row
    retry_at: float = 0.0
    done: bool = False
    last_error: str = field(default="", repr=False)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class FetchStats:
    fetches: int = 0
    response_bytes: int = 0
    retries: int = 0
    prefetched: int = 0  # fetches sent before the previous response was decoded
    decode_s: float = 0.0  # wall time in the decoder
    wait_s: float = 0.0  # wall time waiting for responses (the broker, or the network, is behind the decoder)
    bytes_by_node: dict[int, int] = field(default_factory=dict)  # record bytes fetched from each broker


class Fetcher:
    """Reads `cursors` (one topic) to their ends; iterate `run()` for (cursor, buffers) pairs."""

    def __init__(self, cluster: Cluster, cfg: ReaderConfig, cursors: Sequence[Cursor],
                 decompress: Callable[[int, memoryview], Any]) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.cursors = list(cursors)
        self.decompress = decompress
        self.stats = FetchStats()
        self._stale = True  # leaders must be looked up before the first fetch
        # (node, lane) -> the cursors asked, the bound on the answer's size, the connection asked
        self._inflight: dict[tuple[int, int], tuple[list[Cursor], int, Connection]] = {}

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> Iterator[tuple[Cursor, tuple[Any, ...]]]:
        for c in self.cursors:
            c.done = c.done or c.position >= c.end
        while True:
            live = [c for c in self.cursors if not c.done]
            if not live and not self._inflight:
                return
            if self._stale and live:
                self._refresh(live)
            self._send_idle(live)
            if not self._inflight:
                wait = min((c.retry_at for c in live), default=0.0) - time.monotonic()
                time.sleep(max(wait, 0.001))
                continue
            key = self._next_answer()
            asked, _, conn = self._inflight.pop(key)
            yield from self._receive(key, conn, asked)

    def _next_answer(self) -> tuple[int, int]:
        """The connection whose answer to read next: one already in, else the oldest request."""
        for key, (_, _, conn) in self._inflight.items():
            if conn.answered:
                return key
        return next(iter(self._inflight))

    def _target(self, c: Cursor) -> int:
        if c.preferred >= 0 and c.preferred in self.cluster.brokers:
            return c.preferred
        return c.leader

    def _response_bound(self, n_partitions: int) -> int:
        return min(self.cfg.fetch_max_bytes, n_partitions * self.cfg.max_partition_fetch_bytes) + 1024

    def _buffered(self) -> int:
        return sum(bound for _, bound, _ in self._inflight.values())

    def _send_idle(self, live: list[Cursor]) -> None:
        """A Fetch to every broker that has none in flight, for its partitions not waiting for a retry."""
        now = time.monotonic()
        busy = {id(c) for cs, _, _ in self._inflight.values() for c in cs}
        by_key: dict[tuple[int, int], list[Cursor]] = {}
        for c in live:
            if id(c) in busy or c.retry_at > now:
                continue
            node = self._target(c)
            if node < 0:
                self._fail(c, f"{c} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
                continue
            if (node, c.lane) not in self._inflight:
                by_key.setdefault((node, c.lane), []).append(c)
        for key, cs in by_key.items():
            bound = self._response_bound(len(cs))
            if self._inflight and self._buffered() + bound > self.cfg.queued_max_bytes:
                continue  # at least one request is always allowed, whatever the cap
            self._send(key, cs, bound)

    def _send(self, key: tuple[int, int], cs: list[Cursor], bound: int) -> bool:
        try:
            conn = self.cluster.connection(*key)
            version = conn.version(FETCH, *FETCH_VERSIONS)
            conn.send(FETCH, version, self._fetch_body(cs))
        except BrokerUnavailableError as e:
            for c in cs:
                self._fail(c, str(e), None)
            return False
        self._inflight[key] = (cs, bound, conn)
        self.stats.fetches += 1
        return True

    def _fetch_body(self, cs: list[Cursor]) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "replica_id": -1, "max_wait_ms": cfg.fetch_wait_max_ms, "min_bytes": cfg.fetch_min_bytes,
            "max_bytes": cfg.fetch_max_bytes, "isolation_level": int(cfg.read_committed),
            "session_id": 0, "session_epoch": -1,  # no fetch session: each request names its partitions
            "topics": [{"topic": cs[0].topic, "partitions": [
                {"partition": c.partition, "current_leader_epoch": c.leader_epoch, "fetch_offset": c.position,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": cfg.max_partition_fetch_bytes}
                for c in cs]}],
            "forgotten_topics_data": [], "rack_id": cfg.client_rack,
        }

    def _receive(self, key: tuple[int, int], conn: Connection, asked: list[Cursor]
                 ) -> Iterator[tuple[Cursor, tuple[Any, ...]]]:
        node = key[0]
        t0 = time.perf_counter()
        try:
            resp = conn.receive()
        except BrokerUnavailableError as e:
            for c in asked:
                self._fail(c, str(e), None)
            return
        finally:
            self.stats.wait_s += time.perf_counter() - t0
        if resp.error_code != ErrorCode.NONE:
            for c in asked:
                self._handle_error(c, node, resp.error_code)
            return
        parts = {p.partition_index: p for t in resp.responses for p in t.partitions}
        ready: list[tuple[Cursor, Struct, memoryview]] = []
        size = 0
        for c in asked:
            p = parts.get(c.partition)
            if p is None:
                self._fail(c, f"the Fetch response from broker {node} leaves out {c}", None)
            elif p.error_code != ErrorCode.NONE:
                self._handle_error(c, node, p.error_code)
            elif p.preferred_read_replica >= 0 and p.preferred_read_replica != node:
                c.preferred = p.preferred_read_replica  # KIP-392: no records; read from that replica next
            else:
                records = p.records if p.records is not None else memoryview(b"")
                if self._advance(c, node, records):
                    ready.append((c, p, records))
                    size += len(records)
        self.stats.response_bytes += size
        self.stats.bytes_by_node[node] = self.stats.bytes_by_node.get(node, 0) + size
        self._prefetch(key, conn, [c for c, _, _ in ready], size)
        for c, p, records in ready:
            yield from self._decode(c, p, records)

    def _advance(self, c: Cursor, node: int, records: memoryview) -> bool:
        """Move the cursor past the complete batches of `records` (their headers only). False if there are
        none, which is counted: the range's end is below the high watermark the read was planned with,
        so data must come (a follower catching up, a long poll that expired) unless the log lost it."""
        nxt, complete = dec.scan(records)
        if complete and nxt > c.position:
            c.position = nxt
            c.empty = 0
            c.failures = 0
            return True
        if len(records) and not complete:
            raise ReaderError(f"{c}: the record batch at offset {c.position} is larger than the "
                              f"{len(records)} bytes fetched; raise max.partition.fetch.bytes and fetch.max.bytes")
        c.empty += 1
        if c.preferred >= 0:
            c.preferred = -1  # a follower without the data yet: read from the leader
        if c.empty > max(self.cfg.retries, 1):
            raise ReaderError(f"{c}: no records at offset {c.position} after {c.empty} fetches, though the read "
                              f"was planned up to offset {c.end} (has the log been truncated?)")
        return False

    def _prefetch(self, key: tuple[int, int], conn: Connection, cs: list[Cursor], held: int) -> None:
        """Send the next Fetch on `key`'s connection now, while the response just received (`held` bytes) is
        decoded, if the cap on buffered responses leaves room for it."""
        go = [c for c in cs if c.position < c.end and self._target(c) == key[0] and not self._stale]
        if not go:
            return
        bound = self._response_bound(len(go))
        if held + self._buffered() + bound > self.cfg.queued_max_bytes:
            return
        if self._send(key, go, bound):
            self.stats.prefetched += 1
            conn.receive_later()

    def _decode(self, c: Cursor, p: Struct, records: memoryview) -> Iterator[tuple[Cursor, tuple[Any, ...]]]:
        d = c.decoder
        if self.cfg.read_committed:
            aborted = p.aborted_transactions or ()
            d.set_aborted(sorted(((a.producer_id, a.first_offset) for a in aborted), key=lambda a: a[1]))
        pos = 0
        max_rows, max_bytes = self.cfg.arrow_batch_max_records, self.cfg.arrow_batch_max_bytes
        while True:
            t0 = time.perf_counter()
            try:
                pos, status = d.feed(records, pos, self.decompress, max_rows, max_bytes)
            except dec.CorruptRecordError as e:
                raise CorruptBatchError(f"{c}: {e}") from None
            except (CorruptCompressedDataError, DecompressedTooLargeError) as e:
                raise CorruptBatchError(f"{c}: a compressed record batch near offset {d.next_offset} does not "
                                        f"decompress: {e}") from None
            finally:
                self.stats.decode_s += time.perf_counter() - t0
            if status == dec.FULL:
                taken = d.take()
                if taken is not None:
                    yield c, taken
                continue
            break
        if status == dec.DONE or d.next_offset >= c.end:
            c.done = True
            taken = d.take()
            if taken is not None:
                yield c, taken

    # --- failures ------------------------------------------------------------------------------

    def _handle_error(self, c: Cursor, node: int, code: int) -> None:
        err = as_code(code)
        from_follower = c.preferred >= 0 and node == c.preferred
        if err == ErrorCode.OFFSET_OUT_OF_RANGE and not from_follower:
            bounds = self.cluster.list_offsets(c.topic, {c.partition: EARLIEST}, False)
            ends = self.cluster.list_offsets(c.topic, {c.partition: LATEST}, False)
            raise OffsetOutOfRangeError(c.topic, c.partition, c.position, bounds[c.partition], ends[c.partition])
        if err in RETRIABLE or from_follower:
            # A follower that cannot serve the offset (behind, or no longer a replica): back to the leader.
            c.preferred = -1
            self._fail(c, f"broker {node} answered {error_name(code)} for {c} at offset {c.position}", err)
            return
        raise ReaderError(f"Fetch of {c} at offset {c.position} from broker {node} failed: {error_name(code)}", err)

    def _fail(self, c: Cursor, why: str, code: ErrorCode | None) -> None:
        """A retriable failure: refresh the metadata and retry after a backoff, or give up past `retries`."""
        c.failures += 1
        c.last_error = why
        self.stats.retries += 1
        self._stale = True
        if c.failures > self.cfg.retries:
            raise (ReaderError if code is not None else BrokerUnavailableError)(
                f"reading {c} failed {c.failures} times in a row (retries={self.cfg.retries}); last: {why}", code)
        c.retry_at = time.monotonic() + self.cluster.backoff.delay_s(c.failures)

    def _refresh(self, live: list[Cursor]) -> None:
        leaders = self.cluster.partitions(live[0].topic)
        for c in live:
            info = leaders.get(c.partition)
            if info is None:
                raise ReaderError(f"{c} no longer exists", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            c.leader, c.leader_epoch = info.leader, info.leader_epoch
        self._stale = False
