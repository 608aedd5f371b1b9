"""A real Apache ZooKeeper (the Debian package `zookeeper`) as a child process on a free loopback port.

Used by the tests, `gregor cluster up` and the benchmarks: a standalone server with its own data dir,
started with ZooKeeperServerMain as the package's scripts do, ready once it answers `srvr`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from gregor.tools.ports import pick_port

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar",)
ZOOKEEPER_CONF_DIR = "/etc/zookeeper/conf"


def zookeeper_available() -> str | None:
    """None when a ZooKeeper can be started here, else why not (for skips and error messages)."""
    if shutil.which("java") is None:
        return "java is not installed"
    if not os.path.exists(ZOOKEEPER_JARS[0]):
        return "ZooKeeper is not installed (apt-get install -y zookeeper)"
    return None


def _classpath() -> str:
    """The Debian package's own classpath (/etc/zookeeper/conf/environment): the jar's manifest names
    its dependencies; the conf dir gives log4j its properties."""
    return f"{ZOOKEEPER_CONF_DIR}:{ZOOKEEPER_JARS[0]}"


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1. `start()` waits until it answers; `stop()` and `kill()`
    end it (SIGTERM / SIGKILL); the data dir is removed by `cleanup()` unless it was given."""

    def __init__(self, data_dir: str | Path | None = None, port: int = 0) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="gregor-zk-"))
        self.port = port or pick_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> ZooKeeperServer:
        why = zookeeper_available()
        if why is not None:
            raise RuntimeError(why)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime=500\ndataDir={self.data_dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,mntr\n"
            # Sessions of 1.2 s to 20 s (min/max are 2x/40x the tick by default): brokers choose theirs.
            "minSessionTimeout=1000\nmaxSessionTimeout=60000\n"
        )
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.log.dir=" + str(self.data_dir),
             "-Dzookeeper.root.logger=INFO,CONSOLE", "-Dzookeeper.jmx.log4j.disable=true", "-cp", _classpath(),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.is_serving():
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not answer within {timeout_s} s:\n{self.log_tail()}")

    def is_serving(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                s.sendall(b"srvr")
                return b"Zookeeper version" in s.recv(4096)
        except OSError:
            return False

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
