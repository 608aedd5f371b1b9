"""What the ZooKeeper watcher's readers share: the client, pipelined requests, the watch queue, the image lock.

ZooKeeper watches are one-shot and fire on kazoo's thread, where no broker code may run: `on_watch` only
queues the path for the reader thread (zk_watcher.ZooKeeperWatcher), which hands it to the reader of
that part of the image (zk_topic_reader, zk_config_reader). Every reader publishes under the one image
lock, through `publish_locked`, which numbers the events with the one counter: events leave in version
order whichever reader found them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from gregor.metadata.store import MetadataEvent


class ReadContext:
    def __init__(self, zk: KazooClient, max_in_flight: int, publish: Callable[[MetadataEvent], None]) -> None:
        self.zk = zk
        self._publish = publish
        self.lock = threading.Lock()  # the image (every reader's part of it) and the version
        self.version = 0
        # Work for the reader thread: ("path", p), ("sync", done, paths), ("lost",), ("restored",),
        # ("resync",), ("stop",).
        self.queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.closed = False
        # zookeeper.max.in.flight.requests, as Kafka's ZooKeeperClient: pipelined requests wait for a permit,
        # released when ZooKeeper answers (on kazoo's callback thread, which never waits for one).
        self._in_flight = threading.BoundedSemaphore(max_in_flight)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One pipelined kazoo request, within zookeeper.max.in.flight.requests."""
        self._in_flight.acquire()
        try:
            r = fn(*args, **kwargs)
        except BaseException:
            self._in_flight.release()
            raise
        r.rawlink(lambda _: self._in_flight.release())
        return r

    def get_watched(self, path: str) -> Any:
        """A pipelined read of `path` that sets its data watch."""
        return self.call(self.zk.get_async, path, watch=self.on_watch)

    def exists_watched(self, path: str) -> Any:
        """A pipelined exists of `path` that sets a watch, there or not."""
        return self.call(self.zk.exists_async, path, watch=self.on_watch)

    def on_watch(self, event: WatchedEvent) -> None:
        """kazoo's thread: only queue the path (a read on the reader thread follows)."""
        if event.path is not None and not self.closed:
            self.queue.put(("path", event.path))

    def publish_locked(self, kind: str, **fields: Any) -> None:
        """Publish the next event (under `lock`)."""
        self.version += 1
        self._publish(MetadataEvent(self.version, kind, **fields))
