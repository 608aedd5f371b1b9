"""Fuzz a real broker with mutated requests of every API it advertises, and check it survives.

    python benchmarks/fuzz_broker.py [--count 1000000] [--seed 1] [--connections 4] [--batch 32]
                                     [--time-limit S] [--safe] [--out DIR]
    python benchmarks/fuzz_broker.py --seed 1 --index 4711      # replay one input on a fresh broker
    python benchmarks/fuzz_broker.py --replay /tmp/gregor-fuzz-findings/1-4711.hex
    python benchmarks/fuzz_broker.py --smoke     # tiny, for CI: it still runs end to end

What it does: starts `gregor serve` (gregor.tools.local_broker) on a fresh data dir with overrides
that keep partitions, segments and waits small; writes a canary topic; then sends the inputs of
benchmarks/fuzzlib.py (valid requests of every advertised API at every version, mutated
structurally and at the byte level) over several connections, pipelined in batches. Each batch
ends with a sentinel ApiVersions request: responses come in request order, so the sentinel's
answer proves the broker dealt with everything before it. Checked throughout:
- no Traceback and no ERROR/CRITICAL line in the broker's log (finding `log_error`);
- no hang: every batch's sentinel is answered, or the connection closed, within --hang-timeout
  (finding `hang`), unless an input asked the broker to wait (a Fetch with a long max_wait_ms);
- a fresh connection's ApiVersions answers within --probe-limit every second (finding `slow_probe`);
- the process stays up (finding `broker_died`);
and at the end: SIGTERM exits 0, the broker restarts on the same data dir, and the canary topic
written before fuzzing is still there with its records (finding `restart`).

A `log_error` names the inputs in flight when the line appeared; after the run each of them is
replayed alone on the still-running broker to name the one that causes it. Every finding prints
the seed, the input index and a hex dump, and writes the inputs to --out as .hex files that
--replay sends again. Input I of seed S is the same bytes on every run (see fuzzlib).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `gregor` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fuzzlib import (  # noqa: E402
    CANARY_TOPIC,
    INTERNAL_TOPICS,
    POOL_TOPICS,
    FuzzInput,
    InputMaker,
    Options,
    hexdump,
)
from gregor.protocol import apis  # noqa: E402
from gregor.protocol.frames import decode_response, encode_request  # noqa: E402
from gregor.protocol.records import Record, build_batch, iter_records  # noqa: E402
from gregor.tools.local_broker import BrokerProcess  # noqa: E402

#: Broker overrides for fuzzing: small partition counts and segments, no waits that look like hangs.
FUZZ_OVERRIDES = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "0",
    "group.max.session.timeout.ms": "10000",
    "log.segment.bytes": "1048576",
    "log.retention.bytes": "4194304",
    "log.retention.check.interval.ms": "5000",
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.backoff.ms": "2000",
    "auto.create.topics.enable": "true",
}
_BAD_LINE = re.compile(r"Traceback|\bERROR\b|\bCRITICAL\b")
_SENTINEL_BASE = 0x7E000000
CANARY_VALUES = [b"canary-%d" % i for i in range(30)]


@dataclass
class Finding:
    kind: str  # log_error, hang, slow_probe, broker_died, restart
    detail: str
    inputs: list[FuzzInput] = field(default_factory=list)
    culprits: list[FuzzInput] = field(default_factory=list)  # the inputs a replay showed to cause it
    signature: str = ""


@dataclass
class Report:
    seed: int
    inputs_sent: int = 0
    elapsed_s: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    by_api: Counter[str] = field(default_factory=Counter)
    answered_by_api: Counter[str] = field(default_factory=Counter)  # reached a handler and got an answer
    kinds: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)
    restart_ok: bool = False
    janitor_deleted: int = 0
    max_rss_bytes: int = 0  # the broker's, sampled every second
    signatures: Counter[str] = field(default_factory=Counter)  # log errors by kind, with how often seen

    @property
    def rate(self) -> float:
        return self.inputs_sent / self.elapsed_s if self.elapsed_s else 0.0

    def finding_kinds(self) -> Counter[str]:
        return Counter(f.kind for f in self.findings)


# --- a blocking client for setup, checks and replays ----------------------------------

class _Client:
    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.cid = 0

    def request(self, key: int, version: int, body: Any) -> Any:
        self.cid += 1
        api = apis.BY_KEY[key]
        self.sock.sendall(encode_request(api, version, self.cid, "fuzz-setup", body))
        cid, resp = decode_response(self.recv_frame(), api, version)
        assert cid == self.cid
        return resp

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _create_topic(c: _Client, name: str, partitions: int, configs: dict[str, str] | None = None) -> int:
    resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                         "assignments": [], "configs": [{"name": k, "value": v}
                                                                        for k, v in (configs or {}).items()]}],
                             "timeout_ms": 5000, "validate_only": False})
    return resp.topics[0].error_code


def _produce(c: _Client, topic: str, batch: bytes) -> int:
    resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0].error_code


def _fetch_values(c: _Client, topic: str) -> list[bytes | None]:
    resp = c.request(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                             "topics": [{"topic": topic, "partitions": [
                                 {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                             "forgotten_topics_data": [], "rack_id": ""})
    p = resp.responses[0].partitions[0]
    if p.error_code:
        raise RuntimeError(f"fetch {topic}: error {p.error_code}")
    return [r.value for r in iter_records(bytes(p.records or b""))]


def canary_problem(port: int) -> str | None:
    """None while the canary topic (never named by any input) still holds offsets 0..29."""
    try:
        c = _Client(port)
        try:
            got = []
            for ts in (-2, -1):
                resp = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": CANARY_TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                           "timestamp": ts}]}]})
                p = resp.topics[0].partitions[0]
                got.append((p.error_code, p.offset))
        finally:
            c.close()
    except (OSError, ConnectionError) as e:
        return f"canary check failed: {e!r}"
    if got != [(0, 0), (0, len(CANARY_VALUES))]:
        return f"canary {CANARY_TOPIC} (error, offset) earliest/latest = {got}, expected 0/{len(CANARY_VALUES)}"
    return None


def advertised_versions(port: int) -> dict[int, tuple[int, int]]:
    c = _Client(port)
    try:
        resp = c.request(18, 3, {"client_software_name": "fuzz", "client_software_version": "1"})
    finally:
        c.close()
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def setup_topics(port: int) -> None:
    """The canary (checked after the restart) and the pool topics the inputs name."""
    c = _Client(port)
    try:
        assert _create_topic(c, CANARY_TOPIC, 1) == 0
        for i in range(0, len(CANARY_VALUES), 10):
            # timestamped now: retention (7 days by default) must not remove it during the run
            now_ms = int(time.time() * 1000)
            recs = [Record(j, now_ms + j, b"k", CANARY_VALUES[i + j]) for j in range(10)]
            assert _produce(c, CANARY_TOPIC, build_batch(recs)) == 0
        _create_topic(c, "fz-0", 2)
        _create_topic(c, "fz-1", 1)
        _create_topic(c, "fz-2", 3)
        _create_topic(c, "fz-compact", 1, {"cleanup.policy": "compact", "segment.bytes": "65536"})
        _create_topic(c, "fz-zstd", 1, {"compression.type": "zstd"})
    finally:
        c.close()


_EXC_LINE = re.compile(r"^[\w.]*(Error|Exception|error|Exit|Interrupt)\b")


def signature(lines: list[str]) -> str:
    """What kind of log error this is: its first bad line and the exception it ends in, numbers blanked."""
    first = next((ln for ln in lines if _BAD_LINE.search(ln) and "Traceback" not in ln), lines[0] if lines else "")
    first = re.sub(r"^\[[^]]*\] ", "", first)
    exc = next((ln for ln in lines if _EXC_LINE.match(ln)), "")
    return re.sub(r"0x[0-9a-f]+|\d+", "N", f"{first} | {exc}")[:300]


def _sentinel(cid: int) -> bytes:
    return encode_request(apis.BY_KEY[18], 0, cid, "fuzz-sentinel", {})


def _api_name(key: int) -> str:
    return apis.BY_KEY[key].name if key in apis.BY_KEY else "unknown"


def _cid_of(fi: FuzzInput) -> int | None:
    return struct.unpack_from(">i", fi.data, 8)[0] if len(fi.data) >= 12 else None


# --- the run ----------------------------------------------------------------------------

class Fuzzer:
    def __init__(self, broker: BrokerProcess, maker: InputMaker, report: Report, *, count: int, connections: int,
                 batch: int, hang_timeout_s: float, probe_limit_s: float, time_limit_s: float | None,
                 out_dir: Path | None, verbose: bool) -> None:
        self.broker = broker
        self.maker = maker
        self.report = report
        self.count = count
        self.connections = connections
        self.batch = batch
        self.hang_timeout_s = hang_timeout_s
        self.probe_limit_s = probe_limit_s
        self.time_limit_s = time_limit_s
        self.out_dir = out_dir
        self.verbose = verbose
        self.next_index = 0
        self.sentinel = _SENTINEL_BASE
        self.recent: collections.deque[tuple[float, FuzzInput]] = collections.deque()
        self.log_pos = len(broker.log_lines)
        self.stop = False
        self.t0 = 0.0
        self.canary_broken = False

    def _take(self) -> list[int]:
        if self.stop or self.next_index >= self.count:
            return []
        if self.time_limit_s is not None and time.monotonic() - self.t0 > self.time_limit_s:
            return []
        lo = self.next_index
        self.next_index = min(self.count, lo + self.batch)
        return list(range(lo, self.next_index))

    def add_finding(self, f: Finding) -> None:
        self.report.findings.append(f)
        print_finding(f, self.report.seed, self.out_dir)

    async def run(self) -> None:
        self.t0 = time.monotonic()
        monitor = asyncio.create_task(self._monitor())
        await asyncio.gather(*(self._worker() for _ in range(self.connections)))
        self.stop = True
        await monitor
        self.report.elapsed_s = time.monotonic() - self.t0
        self._scan_log(final=True)

    # --- sending ----------------------------------------------------------------------
    async def _worker(self) -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while True:
            idxs = self._take()
            if not idxs:
                break
            inputs = [self.maker.make(i) for i in idxs]
            now = time.monotonic()
            for fi in inputs:
                self.recent.append((now, fi))
                self.report.by_api[_api_name(fi.api_key)] += 1
                self.report.kinds[fi.kind] += 1
            self.report.inputs_sent += len(inputs)
            for fi in inputs:
                if fi.standalone:
                    await self._send_standalone(fi)
            piped = [fi for fi in inputs if not fi.standalone]
            while piped:
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", self.broker.port, limit=1 << 16)
                piped = await self._send_batch(conn, piped)
                if piped is None:  # hang: the batch is reported, the connection dropped
                    piped = []
                    conn[1].close()
                    conn = None
                elif piped:  # closed by the broker: resend what it never read on a new connection
                    conn[1].close()
                    conn = None
        if conn is not None:
            conn[1].close()

    async def _send_standalone(self, fi: FuzzInput) -> None:
        """A frame whose size lies: on its own connection, closed by us if the broker waits for more."""
        try:
            r, w = await asyncio.open_connection("127.0.0.1", self.broker.port)
        except OSError as e:
            self.add_finding(Finding("probe_failed", f"connect failed: {e!r}", [fi]))
            return
        w.write(fi.data)
        try:
            got = await asyncio.wait_for(r.read(1 << 16), 0.05)
            self.report.outcomes["frame_lie_closed" if not got else "frame_lie_answered"] += 1
        except TimeoutError:
            self.report.outcomes["frame_lie_waiting"] += 1
        except OSError:
            self.report.outcomes["frame_lie_closed"] += 1
        w.close()

    async def _send_batch(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                          piped: list[FuzzInput]) -> list[FuzzInput] | None:
        """Send the inputs and a sentinel; tally outcomes. Returns the inputs the broker never read
        because an earlier one made it close the connection ([] if all were dealt with), None on a hang."""
        r, w = conn
        self.sentinel += 1
        sentinel = self.sentinel
        w.write(b"".join(fi.data for fi in piped) + _sentinel(sentinel))
        answered: set[int] = set()
        try:
            await asyncio.wait_for(self._read_until(r, sentinel, answered), self.hang_timeout_s)
        except TimeoutError:  # first: TimeoutError is an OSError
            if any(fi.may_park for fi in piped):
                self.report.outcomes["parked_on_purpose"] += len(piped)
            else:
                self.add_finding(Finding("hang", f"no answer to the batch's sentinel within {self.hang_timeout_s}s "
                                                 f"and the connection is still open", list(piped)))
            return None
        except (asyncio.IncompleteReadError, OSError):  # closed by the broker (ConnectionError is an OSError)
            return self._tally(piped, answered, closed=True)
        self._tally(piped, answered, closed=False)
        return []

    async def _read_until(self, r: asyncio.StreamReader, sentinel: int, answered: set[int]) -> None:
        while True:
            (size,) = struct.unpack(">i", await r.readexactly(4))
            frame = await r.readexactly(size)
            cid = struct.unpack_from(">i", frame, 0)[0] if size >= 4 else None
            if cid == sentinel:
                return
            if cid is not None:
                answered.add(cid)

    def _tally(self, piped: list[FuzzInput], answered: set[int], closed: bool) -> list[FuzzInput]:
        """Count outcomes. On a close, the input taken as the one that closed it is the first unanswered
        mutated one: a well-formed input before it may still have been waiting for its answer (a
        controller write, a purgatory) when the close cut it short, so it is sent again with the inputs
        after the closer, which the broker never read. Without a mutated one, the first unanswered input
        is the closer (it may have been an acks=0 Produce before it: then the closer is simply sent again).
        Every round drops one input, so resending ends."""
        oc = self.report.outcomes
        unanswered: list[int] = []
        for i, fi in enumerate(piped):
            if _cid_of(fi) in answered:
                oc["answered"] += 1
                self.report.answered_by_api[_api_name(fi.api_key)] += 1
            elif not closed:
                oc["no_response"] += 1  # acks=0 Produce
            else:
                unanswered.append(i)
        if not unanswered:
            return []
        closer = next((i for i in unanswered if piped[i].kind != "valid"), unanswered[0])
        oc["connection_closed"] += 1
        return [piped[i] for i in unanswered if i < closer] + [piped[i] for i in unanswered if i > closer]

    # --- watching the broker ------------------------------------------------------------
    async def _monitor(self) -> None:
        last_janitor = time.monotonic()
        while not self.stop:
            await asyncio.sleep(1.0)
            if self.broker.proc is not None and self.broker.proc.poll() is not None:
                self.add_finding(Finding("broker_died", f"exit code {self.broker.proc.returncode}",
                                         [fi for _, fi in self.recent]))
                self.stop = True
                return
            await self._probe()
            self._sample_rss()
            self._scan_log()
            if not self.canary_broken:
                problem = await asyncio.get_running_loop().run_in_executor(None, canary_problem, self.broker.port)
                if problem:
                    self.canary_broken = True
                    self.add_finding(Finding("canary_changed", problem,
                                             [fi for ts, fi in self.recent if ts > time.monotonic() - 3.0]))
            if time.monotonic() - last_janitor > 20:
                last_janitor = time.monotonic()
                await asyncio.get_running_loop().run_in_executor(None, self._janitor)
            if self.verbose:
                el = time.monotonic() - self.t0
                print(f"[{el:7.1f}s] {self.report.inputs_sent} inputs, {self.report.inputs_sent / el:.0f}/s, "
                      f"findings {dict(self.report.finding_kinds())}", flush=True)

    async def _probe(self) -> None:
        t = time.monotonic()
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.broker.port), 5)
            w.write(_sentinel(1))
            (size,) = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), 10))
            await asyncio.wait_for(r.readexactly(size), 10)
            w.close()
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
            self.add_finding(Finding("probe_failed", f"a fresh connection's ApiVersions failed: {e!r}"))
            return
        dt = time.monotonic() - t
        self.report.probes.append(dt)
        if dt > self.probe_limit_s:
            around = "\n".join(ln[:300] for ln in self.broker.log_lines[-12:])
            self.add_finding(Finding("slow_probe", f"a fresh connection's ApiVersions took {dt:.2f}s; "
                                                   f"broker log before it:\n{around}",
                                     [fi for ts, fi in self.recent if ts > t - 2]))

    def _sample_rss(self) -> None:
        if self.broker.proc is None:
            return
        try:
            with open(f"/proc/{self.broker.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
                        self.report.max_rss_bytes = max(self.report.max_rss_bytes, rss)
        except OSError:
            pass  # not Linux, or the process is gone (the monitor reports that)

    def _scan_log(self, final: bool = False) -> None:
        lines = self.broker.log_lines
        end = len(lines)
        now = time.monotonic()
        bad = [ln for ln in lines[self.log_pos:end] if _BAD_LINE.search(ln)]
        if bad:
            # the log lags the inputs that caused a line by well under the scan period
            cands = [fi for ts, fi in self.recent if ts > now - 3.0]
            ctx = lines[self.log_pos:end]
            first = next(i for i, ln in enumerate(ctx) if _BAD_LINE.search(ln))
            detail = "\n".join(ctx[first:first + 40])
            sig = signature(ctx[first:])
            self.report.signatures[sig] += 1
            if self.report.signatures[sig] <= 2:  # a recurring error is counted, not reported again
                self.add_finding(Finding("log_error", detail, cands, signature=sig))
        self.log_pos = end
        while self.recent and self.recent[0][0] < now - 5.0:
            self.recent.popleft()

    def _janitor(self) -> None:
        """Delete topics the inputs created by accident (mutated names), so a long run's disk stays bounded."""
        keep = set(POOL_TOPICS) | set(INTERNAL_TOPICS) | {CANARY_TOPIC}
        try:
            c = _Client(self.broker.port)
            md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
            extra = [t.name for t in md.topics if t.name not in keep]
            for i in range(0, len(extra), 100):
                c.request(20, 4, {"topic_names": extra[i:i + 100], "timeout_ms": 5000})
            self.report.janitor_deleted += len(extra)
            c.close()
        except (OSError, ConnectionError, AssertionError):
            pass  # the probe reports an unresponsive broker


def replay_one(port: int, fi: FuzzInput, timeout_s: float = 10.0) -> str:
    """Send one input then a sentinel on a fresh connection; what happened, in a word."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        s.sendall(fi.data + (b"" if fi.standalone else _sentinel(_SENTINEL_BASE - 1)))
        buf = bytearray()
        answers = 0
        while True:
            try:
                chunk = s.recv(1 << 16)
            except TimeoutError:
                return "waiting" if fi.standalone else f"hang ({answers} answers)"
            if not chunk:
                return f"closed by broker after {answers} answers"
            buf += chunk
            while len(buf) >= 8:
                (size,) = struct.unpack_from(">i", buf, 0)
                if len(buf) < 4 + size:
                    break
                cid = struct.unpack_from(">i", buf, 4)[0]
                del buf[: 4 + size]
                if cid == _SENTINEL_BASE - 1:
                    return f"answered ({answers} answers before the sentinel)"
                answers += 1
    finally:
        s.close()


def _causes_bad_line(broker: BrokerProcess, fis: list[FuzzInput], sig: str) -> bool:
    """Replaying these inputs logs an error of this signature again (another error does not count:
    state left by the run, such as a group no response can name, makes innocent requests fail)."""
    pos = len(broker.log_lines)
    for fi in fis:
        try:
            replay_one(broker.port, fi, timeout_s=5.0)
        except OSError:
            pass
    time.sleep(0.2)  # the log reader thread lags a little
    lines = broker.log_lines[pos:]
    starts = [i for i, ln in enumerate(lines) if _BAD_LINE.search(ln) and "Traceback" not in ln]
    return any(signature(lines[i:i + 60]) == sig for i in starts)


def triage(broker: BrokerProcess, finding: Finding, budget_s: float = 20.0) -> None:
    """Replay a log_error's candidate inputs in groups on the still-running broker and bisect the
    group that logs a bad line again down to one input. Best effort: an error that needs the
    state of the moment (another connection's request) may not come back."""
    t_end = time.monotonic() + budget_s
    cands = finding.inputs
    for i in range(0, len(cands), 64):
        if time.monotonic() > t_end or broker.proc is None or broker.proc.poll() is not None:
            return
        group = cands[i:i + 64]
        if not _causes_bad_line(broker, group, finding.signature):
            continue
        while len(group) > 1 and time.monotonic() < t_end:
            half = group[: len(group) // 2]
            if _causes_bad_line(broker, half, finding.signature):
                group = half
            elif _causes_bad_line(broker, group[len(group) // 2:], finding.signature):
                group = group[len(group) // 2:]
            else:
                break
        if len(group) == 1:
            finding.culprits.extend(group)
        return


def print_finding(f: Finding, seed: int, out_dir: Path | None, dumps: int = 1) -> None:
    print(f"FINDING {f.kind}: {f.detail}", flush=True)
    shown = f.culprits or f.inputs
    if shown:
        print(f"  {'culprits' if f.culprits else 'inputs in flight'}: {len(shown)}; "
              f"replay with --seed {seed} --index N:", flush=True)
        for fi in shown[:5]:
            print("   ", fi.describe())
        for fi in shown[:dumps]:
            print(hexdump(fi.data, limit=512))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for fi in shown[:50]:
            (out_dir / f"{seed}-{fi.index}.hex").write_text(fi.data.hex() + "\n")


def check_restart(broker: BrokerProcess, report: Report) -> None:
    """SIGTERM, start again on the same data dir, and read the canary written before fuzzing."""
    pos = len(broker.log_lines)
    code = broker.stop()
    if code != 0:
        report.findings.append(Finding("restart", f"SIGTERM exit code {code}:\n" + "\n".join(broker.log_lines[-30:])))
    try:
        broker.start(timeout_s=60)
    except RuntimeError as e:
        report.findings.append(Finding("restart", f"restart failed: {str(e)[-3000:]}"))
        return
    try:
        c = _Client(broker.port)
        values = _fetch_values(c, CANARY_TOPIC)
        c.close()
    except (OSError, ConnectionError, RuntimeError) as e:
        report.findings.append(Finding("restart", f"canary unreadable after restart: {e!r}"))
        return
    if values != CANARY_VALUES:
        report.findings.append(Finding("restart", f"canary data changed: {values[:5]}... ({len(values)} records)"))
        return
    bad = [ln for ln in broker.log_lines[pos:] if _BAD_LINE.search(ln)]
    if bad:
        report.findings.append(Finding("log_error", "during shutdown/restart:\n" + "\n".join(bad[:40])))
    report.restart_ok = True


def run(seed: int = 1, count: int = 3000, *, connections: int = 4, batch: int = 32, opts: Options | None = None,
        hang_timeout_s: float = 20.0, probe_limit_s: float = 1.0, time_limit_s: float | None = None,
        data_dir: Path | None = None, out_dir: Path | None = None, verbose: bool = False,
        extra_overrides: dict[str, str] | None = None, triage_max: int = 8,
        during: Callable[[BrokerProcess], None] | None = None) -> Report:
    """The whole run: start, set up, fuzz, triage, restart check, clean up. Returns the report.
    `during` runs in a thread alongside the fuzzing (the tests use it to freeze the broker and see
    that the checks notice)."""
    own_dir = data_dir is None
    d = Path(tempfile.mkdtemp(prefix="gregor-fuzz-")) if data_dir is None else data_dir
    report = Report(seed)
    broker = BrokerProcess(d / "data", {**FUZZ_OVERRIDES, **(extra_overrides or {})})
    try:
        broker.start()
        setup_topics(broker.port)
        maker = InputMaker(seed, advertised_versions(broker.port), opts)
        fz = Fuzzer(broker, maker, report, count=count, connections=connections, batch=batch,
                    hang_timeout_s=hang_timeout_s, probe_limit_s=probe_limit_s, time_limit_s=time_limit_s,
                    out_dir=out_dir, verbose=verbose)
        side = threading.Thread(target=during, args=(broker,), daemon=True) if during is not None else None
        if side is not None:
            side.start()
        asyncio.run(fz.run())
        if side is not None:
            side.join()
        for f in [f for f in report.findings if f.kind == "log_error" and f.inputs][:triage_max]:
            triage(broker, f)
            if f.culprits:
                print(f"TRIAGE: {f.signature} is caused by {f.culprits[0].describe()}", flush=True)
                print(hexdump(f.culprits[0].data, limit=512), flush=True)
                if out_dir is not None:
                    (out_dir / f"{seed}-{f.culprits[0].index}.hex").write_text(f.culprits[0].data.hex() + "\n")
        if broker.proc is not None and broker.proc.poll() is None:
            check_restart(broker, report)
        for f in report.findings:
            if f.kind == "restart":
                print_finding(f, seed, out_dir)
    finally:
        broker.kill()
        if own_dir:
            shutil.rmtree(d, ignore_errors=True)
    return report


def print_report(r: Report) -> None:
    p = sorted(r.probes)
    print(f"seed {r.seed}: {r.inputs_sent} inputs in {r.elapsed_s:.1f}s = {r.rate:.0f} inputs/s")
    print("outcomes:", dict(r.outcomes.most_common()))
    print("kinds:", dict(r.kinds.most_common()))
    print("by API (sent/answered):", ", ".join(f"{k} {n}/{r.answered_by_api[k]}" for k, n in r.by_api.most_common()))
    if p:
        print(f"probes: {len(p)}, median {p[len(p) // 2] * 1000:.1f} ms, max {p[-1] * 1000:.1f} ms")
    print(f"broker max RSS {r.max_rss_bytes / 2**20:.0f} MiB; janitor deleted {r.janitor_deleted} stray topics; "
          f"restart ok: {r.restart_ok}")
    for sig, n in r.signatures.most_common():
        print(f"log error x{n}: {sig}")
    kinds = r.finding_kinds()
    print(f"findings: {sum(kinds.values())} {dict(kinds)}")
    for f in r.findings:
        first = (f.culprits or f.inputs)[:1]
        print(f"  - {f.kind}: {f.detail.splitlines()[0][:160] if f.detail else ''}"
              + (f" (e.g. {first[0].describe()})" if first else ""))


def _read_hex(path: Path) -> bytes:
    text = path.read_bytes()
    try:
        return bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return text


def replay_main(args: argparse.Namespace) -> int:
    d = Path(tempfile.mkdtemp(prefix="gregor-fuzz-replay-"))
    broker = BrokerProcess(d / "data", FUZZ_OVERRIDES)
    try:
        broker.start()
        setup_topics(broker.port)
        if args.replay:
            data = _read_hex(Path(args.replay))
            key, version = struct.unpack_from(">hh", data, 4) if len(data) >= 8 else (-1, -1)
            size_ok = len(data) >= 4 and struct.unpack_from(">i", data, 0)[0] == len(data) - 4
            fi = FuzzInput(-1, data, key, version, "replay", standalone=not size_ok)
        else:
            opts = Options.safe() if args.safe else Options()
            fi = InputMaker(args.seed, advertised_versions(broker.port), opts).make(args.index)
        print(fi.describe())
        print(hexdump(fi.data, limit=1024))
        pos = len(broker.log_lines)
        print("outcome:", replay_one(broker.port, fi))
        time.sleep(0.3)
        print("broker log since:")
        for ln in broker.log_lines[pos:]:
            print("   ", ln)
        bad = any(_BAD_LINE.search(ln) for ln in broker.log_lines[pos:])
        r = Report(args.seed)
        check_restart(broker, r)
        print("restart ok:", r.restart_ok, *(f.detail[:500] for f in r.findings))
        return 1 if bad or not r.restart_ok else 0
    finally:
        broker.kill()
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32, help="inputs pipelined per connection before the sentinel")
    ap.add_argument("--time-limit", type=float, default=None, help="stop sending after this many seconds")
    ap.add_argument("--hang-timeout", type=float, default=20.0)
    ap.add_argument("--probe-limit", type=float, default=1.0)
    ap.add_argument("--safe", action="store_true",
                    help="leave out the input classes issue 8 lists as known to break the broker")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gregor-fuzz-findings",
                    help="where findings' inputs are written as <seed>-<index>.hex")
    ap.add_argument("--index", type=int, default=None, help="replay input INDEX of --seed on a fresh broker")
    ap.add_argument("--replay", default=None, help="replay a .hex file written by a finding")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.count = 300
    if args.index is not None or args.replay:
        return replay_main(args)
    r = run(args.seed, args.count, connections=args.connections, batch=args.batch,
            opts=Options.safe() if args.safe else Options(), hang_timeout_s=args.hang_timeout,
            probe_limit_s=args.probe_limit, time_limit_s=args.time_limit, out_dir=args.out, verbose=not args.quiet)
    print_report(r)
    return 1 if r.findings else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
