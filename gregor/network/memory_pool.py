"""The request memory pool (queued.max.request.bytes) and what one connection holds in it.

Every frame reserves from the pool before it is buffered or decoded and releases when its response
is built; gregor.network.socket_server's docstring gives the whole memory bound this is part of.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from typing import Protocol

from gregor.protocol.frames import FrameTooLarge

READ_BUFFER_BYTES = 64 * 1024  # per connection; frames that fit it are "small"
MEDIUM_FRAME_BYTES = 1024 * 1024  # up to a producer's default batch size: "medium"
DECODE_EXPANSION = 16  # decoded size / frame size of requests other than Produce (measured 13-15)
PRODUCE_API_KEY = 0
_API_KEY = struct.Struct(">h")


class PoolWaiter(Protocol):
    """A connection waiting for the pool: told (on the loop, soon after a release) what it was granted."""

    def reservation_granted(self, amount: int, tier: int) -> None: ...


class RequestMemoryPool:
    """Bytes of partially received and queued requests, broker-wide (queued.max.request.bytes).

    Frames fall in three tiers by size: small (fit the read buffer), medium (up to 1 MiB, as
    a producer's batches are) and large. Each tier has a share that frames of that tier and
    larger together may not pass: large frames `large_limit_bytes` (socket.request.max.bytes),
    medium and large ones all but a quarter of what large frames cannot take, small frames
    all of it. So however many maximum-size frames are held half-sent, producers' batches
    still have room, and small requests have room even when batches fill theirs. Refused
    reservations wait, in order within a tier, and are granted as bytes are released.

    `connection_share_bytes` is what one connection may hold while it has requests in flight (its
    first is always admitted): a fair part of the pool, so parked requests starve only their sender.
    """

    def __init__(self, capacity_bytes: int, large_limit_bytes: int, small_frame_bytes: int,
                 max_connections: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.small_frame_bytes = small_frame_bytes
        large = min(large_limit_bytes, capacity_bytes)
        self.limits = (capacity_bytes, capacity_bytes - (capacity_bytes - large) // 4, large)
        self.used = [0, 0, 0]  # bytes held by frames of tier >= i
        self.waiters: collections.deque[tuple[PoolWaiter, int, int]] = collections.deque()
        self.connection_share_bytes = 0
        self.set_max_connections(max_connections)

    def set_max_connections(self, max_connections: int) -> None:
        """Resize each connection's share to the pool over max.connections (at least a medium frame)."""
        self.connection_share_bytes = max(self.capacity_bytes // max(max_connections, 1), MEDIUM_FRAME_BYTES)

    def tier(self, size: int) -> int:
        if size <= self.small_frame_bytes:
            return 0
        return 1 if size <= MEDIUM_FRAME_BYTES else 2

    @property
    def used_bytes(self) -> int:
        return self.used[0]

    def _fits(self, size: int, tier: int) -> bool:
        return all(self.used[k] + size <= self.limits[k] for k in range(tier + 1))

    def _take(self, size: int, tier: int) -> None:
        for k in range(tier + 1):
            self.used[k] += size

    def try_reserve(self, amount: int, tier: int) -> bool:
        """Reserve now if the bytes are free and no frame of the same tier waits (no overtaking)."""
        if self.waiters and any(w[2] == tier for w in self.waiters):
            return False
        if not self._fits(amount, tier):
            return False
        self._take(amount, tier)
        return True

    def wait(self, waiter: PoolWaiter, amount: int, tier: int) -> None:
        self.waiters.append((waiter, amount, tier))

    def cancel(self, waiter: PoolWaiter) -> None:
        if self.waiters:
            self.waiters = collections.deque(w for w in self.waiters if w[0] is not waiter)

    def release(self, size: int, tier: int) -> None:
        for k in range(tier + 1):
            self.used[k] -= size
            assert self.used[k] >= 0
        if self.waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        kept: collections.deque[tuple[PoolWaiter, int, int]] = collections.deque()
        blocked: set[int] = set()
        loop = asyncio.get_running_loop()
        for waiter, amount, tier in self.waiters:
            if tier not in blocked and self._fits(amount, tier):
                self._take(amount, tier)
                loop.call_soon(waiter.reservation_granted, amount, tier)
            else:
                blocked.add(tier)  # keep order within a tier
                kept.append((waiter, amount, tier))
        self.waiters = kept


class ConnectionReservations:
    """What one connection holds in the pool, by tier, and the reservation it waits for past its share.

    A connection that already holds its share waits for its own requests to finish, not for others'
    (`own_wait`); once they release enough, the reservation goes to the pool like any other."""

    __slots__ = ("held", "owner", "own_wait", "pool")

    def __init__(self, pool: RequestMemoryPool, owner: PoolWaiter) -> None:
        self.pool = pool
        self.owner = owner
        self.held = [0, 0, 0]  # request bytes this connection holds in the pool, by tier
        self.own_wait: tuple[int, int] | None = None  # a reservation over this connection's share

    def cost(self, size: int, api_key: int) -> tuple[int, int]:
        """What a frame reserves, and its tier. A request other than Produce is decoded into
        Python objects about DECODE_EXPANSION times its size (its arrays of topics and
        partitions); a Produce request's records stay bytes."""
        amount = size if api_key == PRODUCE_API_KEY else size * DECODE_EXPANSION
        return amount, self.pool.tier(size)

    def reserve(self, size: int, api_key: int) -> bool:
        """Reserve for a frame of `size`: True when reserved now; False when it waits (the owner's
        reservation_granted says when). Raises FrameTooLarge for a frame that could never fit."""
        pool = self.pool
        amount, tier = self.cost(size, api_key)
        if amount > pool.limits[tier]:
            raise FrameTooLarge(
                f"request (API key {api_key}) of {size} bytes is too large: decoded it would take {amount} bytes "
                f"of queued.max.request.bytes; requests other than Produce may be at most "
                f"1/{DECODE_EXPANSION} of its share ({pool.limits[tier] // DECODE_EXPANSION} bytes)")
        held = sum(self.held)
        if held and held + amount > pool.connection_share_bytes:
            # Over its share: this connection waits for its own requests, not for others'.
            self.own_wait = (amount, tier)
        elif pool.try_reserve(amount, tier):
            self.held[tier] += amount
            return True
        else:
            pool.wait(self.owner, amount, tier)
        return False

    def release(self, frame: memoryview) -> None:
        """The frame's response was built (or it was dropped): its bytes go back, and a wait for this
        connection's own share may now go to the pool."""
        api_key = _API_KEY.unpack_from(frame)[0] if len(frame) >= 2 else -1
        amount, tier = self.cost(len(frame), api_key)
        self.held[tier] -= amount
        pool = self.pool
        pool.release(amount, tier)
        if self.own_wait is not None:
            want, want_tier = self.own_wait
            held = sum(self.held)
            if not held or held + want <= pool.connection_share_bytes:
                self.own_wait = None
                if pool.try_reserve(want, want_tier):
                    asyncio.get_running_loop().call_soon(self.owner.reservation_granted, want, want_tier)
                else:
                    pool.wait(self.owner, want, want_tier)

    def release_all(self) -> None:
        """On close: frames in flight and a partially received large frame give their bytes back."""
        pool = self.pool
        pool.cancel(self.owner)
        self.own_wait = None
        for tier, n in enumerate(self.held):
            if n:
                self.held[tier] = 0
                pool.release(n, tier)
