"""A quorum node as a process, for tests, benchmarks and trying the quorum by hand:

    python -m gregor.raft.runner --node-id 1 --voters 1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093 \\
        --dir /tmp/q1 --control-port 19191 [--override metadata.log.segment.bytes=65536 ...]

It runs a RaftManager on the metadata log in `--dir` with a small replicated state machine as its
listener (ReplicatedValues: every committed value, in order, with the epoch and the node that wrote it;
snapshotted by metadata.log.max.record.bytes.between.snapshots / .max.snapshot.interval.ms), and answers
JSON lines on 127.0.0.1:--control-port:

    {"id": 1, "op": "append", "value": "x"}   -> {"id": 1, "ok": true, "offset": 17, "epoch": 3} once committed,
                                                 or {"ok": false, "error": "NOT_LEADER", "leader": 2} / "LOST" / "TIMEOUT"
    {"op": "status"}                          -> role, epoch, leader, high watermark, log offsets, snapshot
    {"op": "state"}                           -> every applied value [offset, epoch, value, by] and the
                                                 leader of each epoch (from the LeaderChange records)
    {"op": "bench", "count": N, "size": B, "concurrency": K}
                                              -> appends N values of B bytes, K at a time, from inside the
                                                 leader: commit latencies (p50/p99) and the rate

A line "READY <quorum port> <control port>" on stdout says it is serving. SIGTERM stops it gracefully
(a leader resigns first). `QuorumProcess` starts, signals and talks to one from a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gregor.config.broker import BrokerConfig
from gregor.raft.config import QuorumSettings
from gregor.raft.errors import BufferFullError, NotLeaderError, RaftError
from gregor.raft.listeners import LeaderAndEpoch
from gregor.raft.manager import RaftManager, now_ms
from gregor.raft.metadata_log import MetadataLog
from gregor.raft.records import LEADER_CHANGE, Batch
from gregor.raft.snapshot_policy import SnapshotPolicy
from gregor.raft.snapshots import SnapshotReader

CHUNK_ENTRIES = 500  # entries per snapshot record


class ReplicatedValues:
    """The listener: the committed values in order, rebuilt from the latest snapshot plus the log."""

    def __init__(self, node_id: int, policy: SnapshotPolicy) -> None:
        self.node_id = node_id
        self.policy = policy
        self.manager: RaftManager | None = None
        self.entries: list[list[Any]] = []  # [offset, epoch, value, by]
        self.leaders: dict[int, int] = {}  # epoch -> leader, from the LeaderChange records
        self.next_offset = 0
        self.last_append_ms = -1
        self.leader = LeaderAndEpoch(-1, -1)
        self.snapshots_taken = 0
        self.snapshots_loaded = 0

    def handle_commit(self, batches: list[Batch]) -> None:
        for b in batches:
            assert b.base_offset >= self.next_offset, (b.base_offset, self.next_offset)
            for c in b.control:
                if c.type == LEADER_CHANGE and c.message is not None:
                    self.leaders[b.epoch] = c.message.leader_id
            for i, raw in enumerate(b.records):
                v = json.loads(raw)
                self.entries.append([b.base_offset + i, b.epoch, v["v"], v["by"]])
            self.next_offset = b.next_offset
            self.last_append_ms = b.append_time_ms
            self.policy.committed(b.size_bytes)
        now = now_ms()
        if self.manager is not None and self.policy.due(now):
            self._snapshot(now)

    def _snapshot(self, now: int) -> None:
        assert self.manager is not None
        writer = self.manager.create_snapshot(self.next_offset, self.last_append_ms)
        if writer is not None:
            writer.append([json.dumps({"next_offset": self.next_offset,
                                       "leaders": {str(k): v for k, v in self.leaders.items()}}).encode()])
            for i in range(0, len(self.entries), CHUNK_ENTRIES):
                writer.append([json.dumps(self.entries[i:i + CHUNK_ENTRIES]).encode()])
            writer.freeze()
            self.snapshots_taken += 1
        self.policy.taken(now)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        records = list(reader.records())
        head = json.loads(records[0])
        self.next_offset = head["next_offset"]
        assert self.next_offset == reader.snapshot_id.offset, (head, reader.snapshot_id)
        self.leaders = {int(k): v for k, v in head["leaders"].items()}
        self.entries = [e for r in records[1:] for e in json.loads(r)]
        self.snapshots_loaded += 1

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        props = dict(o.split("=", 1) for o in args.override)
        props.update({"node.id": str(args.node_id), "controller.quorum.voters": args.voters, "metadata.log.dir": args.dir})
        self.settings = QuorumSettings.from_config(BrokerConfig(props))
        config = self.settings.quorum_config()
        self.log = MetadataLog.open(self.settings.log_directory(), self.settings.segment_bytes, self.settings.segment_ms)
        self.values = ReplicatedValues(args.node_id, SnapshotPolicy(self.settings.snapshot_bytes,
                                                                    self.settings.snapshot_interval_ms, now_ms()))
        self.manager = RaftManager(config, self.log, self.log.directory,
                                   max_request_bytes=self.settings.max_request_bytes,
                                   max_connections=self.settings.max_connections)
        self.values.manager = self.manager
        self.manager.register_listener(self.values)
        self.control_port = args.control_port
        self.node_id = args.node_id
        self.append_timeout_s = args.append_timeout_s

    async def run(self) -> None:
        await self.manager.start()
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.control_port, reuse_address=True,
                                            limit=1 << 20)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        print(f"READY {self.manager.port} {self.control_port}", flush=True)
        while not stop.is_set() and self.manager.failure is None:
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except TimeoutError:
                pass
        server.close()
        await self.manager.shutdown()
        if self.manager.failure is not None:
            raise SystemExit(f"the quorum node failed: {self.manager.failure!r}")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks: set[asyncio.Task[None]] = set()
        try:
            while line := await reader.readline():
                req = json.loads(line)
                t = asyncio.create_task(self._answer(req, writer))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except (ConnectionError, ValueError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            writer.close()

    async def _answer(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        op = req.get("op")
        try:
            if op == "append":
                out = await self.append(str(req["value"]))
            elif op == "status":
                out = self.status()
            elif op == "state":
                out = {"entries": self.values.entries, "leaders": self.values.leaders,
                       "next_offset": self.values.next_offset}
            elif op == "bench":
                out = await self.bench(int(req["count"]), int(req["size"]), int(req["concurrency"]))
            else:
                out = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as e:  # an answer, whatever happened
            out = {"ok": False, "error": repr(e)}
        out["id"] = req.get("id")
        writer.write(json.dumps(out).encode() + b"\n")
        await writer.drain()

    async def append(self, value: str) -> dict[str, Any]:
        m = self.manager
        leader, epoch = m.leader_and_epoch()
        if leader != self.node_id:
            return {"ok": False, "error": "NOT_LEADER", "leader": leader, "epoch": epoch}
        try:
            offset = m.schedule_append(epoch, [json.dumps({"v": value, "by": self.node_id}).encode()])
        except (NotLeaderError, BufferFullError) as e:
            return {"ok": False, "error": "NOT_LEADER" if isinstance(e, NotLeaderError) else "BUFFER_FULL",
                    "leader": m.leader_and_epoch().leader_id}
        try:
            await asyncio.wait_for(m.wait_for_commit(offset, epoch), self.append_timeout_s)
        except TimeoutError:
            return {"ok": False, "error": "TIMEOUT", "offset": offset, "epoch": epoch}
        except RaftError as e:
            return {"ok": False, "error": "LOST", "why": str(e), "offset": offset, "epoch": epoch}
        return {"ok": True, "offset": offset, "epoch": epoch}

    def status(self) -> dict[str, Any]:
        d = self.manager.node.describe()
        d["snapshot"] = list(d["snapshot"]) if d["snapshot"] is not None else None
        d.update(ok=True, applied=len(self.values.entries), next_offset=self.values.next_offset,
                 snapshots_taken=self.values.snapshots_taken, snapshots_loaded=self.values.snapshots_loaded,
                 pid=os.getpid())
        return d

    async def bench(self, count: int, size: int, concurrency: int) -> dict[str, Any]:
        """Commit latency and rate of appends made inside the leader (no client round trip in the figures)."""
        m = self.manager
        leader, epoch = m.leader_and_epoch()
        if leader != self.node_id:
            return {"ok": False, "error": "NOT_LEADER", "leader": leader}
        payload = json.dumps({"v": "x" * size, "by": self.node_id}).encode()
        latencies: list[float] = []
        left = [count]

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                t0 = time.perf_counter()
                while True:
                    try:
                        offset = m.schedule_append(epoch, [payload])
                        break
                    except BufferFullError:
                        await asyncio.sleep(0.001)
                await m.wait_for_commit(offset, epoch)
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        latencies.sort()
        return {"ok": True, "count": len(latencies), "elapsed_s": elapsed, "rate": len(latencies) / elapsed,
                "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
                "max_ms": 1000 * latencies[-1]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m gregor.raft.runner", description=__doc__.split("\n\n")[0])
    p.add_argument("--node-id", type=int, required=True)
    p.add_argument("--voters", required=True, help="id@host:port,... (controller.quorum.voters)")
    p.add_argument("--dir", required=True, help="metadata.log.dir")
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--override", action="append", default=[], help="a broker property, key=value")
    p.add_argument("--append-timeout-s", type=float, default=10.0)
    args = p.parse_args(argv)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(Runner(args).run())


# --- driving runner processes (tests, benchmarks) ------------------------------------------------

class QuorumProcess:
    """One runner process: start, kill -9, SIGTERM, SIGSTOP/SIGCONT, and control requests."""

    def __init__(self, node_id: int, voters: str, data_dir: str | Path, control_port: int,
                 overrides: dict[str, str] | None = None) -> None:
        self.node_id = node_id
        self.voters = voters
        self.data_dir = Path(data_dir)
        self.control_port = control_port
        self.overrides = overrides or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / f"node-{node_id}.out"

    def start(self, timeout_s: float = 30.0) -> QuorumProcess:
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> QuorumProcess:
        """Start the process without waiting for it (several start side by side; then `wait_ready`)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "gregor.raft.runner", "--node-id", str(self.node_id), "--voters", self.voters,
               "--dir", str(self.data_dir), "--control-port", str(self.control_port)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        out = open(self.log_path, "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> QuorumProcess:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited: {self.log_path.read_text()[-2000:]}")
            try:
                self.request({"op": "status"}, 1.0)
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"node {self.node_id} did not start: {self.log_path.read_text()[-2000:]}")

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, op: dict[str, Any], timeout_s: float = 15.0) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", self.control_port), timeout=timeout_s) as s:
            s.sendall(json.dumps(op).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"node {self.node_id} closed the control connection")
                buf += chunk
        return json.loads(buf)


if __name__ == "__main__":
    main()
