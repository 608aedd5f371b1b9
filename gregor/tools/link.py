"""A network link between two local processes that a test can cut: a TCP forwarder on loopback.

Processes on one machine reach each other over loopback, which never fails. To cut node A off from node
B (a network partition) without namespaces, A is told to reach B at a `Link`'s port, which forwards to B's
real port. `cut()` blackholes the link: bytes in both directions are dropped (not refused, as a pulled
cable: senders see their requests time out) and new connections are accepted and then hang; `heal()`
forwards again on new connections (the cut ones are closed, as a peer's TCP connection would end after
a long partition). One thread runs every link of a process, each connection with its own pair of
forwarding threads.
"""

from __future__ import annotations

import socket
import threading

from gregor.tools.ports import pick_port


class Link:
    """127.0.0.1:`port` -> 127.0.0.1:`target`, until `cut()`."""

    def __init__(self, target: int, port: int | None = None) -> None:
        self.target = target
        self.port = port or pick_port()
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", self.port))
        self._server.listen(64)
        self._thread = threading.Thread(target=self._accept, name=f"link-{self.port}-{target}", daemon=True)
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._cut.is_set()

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        """Forward again; the connections made before or during the cut are closed first."""
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            _close(s)
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        _close(self._server)
        self.heal()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(client)
            if self._cut.is_set():
                continue  # accepted, never answered: the sender's connect succeeds, its request times out
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if self._cut.is_set():
                continue  # dropped on the floor
            try:
                dst.sendall(data)
            except OSError:
                break
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass
