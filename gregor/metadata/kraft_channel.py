"""How a KRaft node reaches the active controller: the controller listener of the voter the quorum names as
leader (Kafka's NodeToControllerChannelManager).

A request is sent there and, when the answer says NOT_CONTROLLER (the leader has not yet replayed what
its predecessors committed, or lost the leadership) or the connection fails, sent again once a leader
is known, `retry_backoff_s` apart, until its deadline. Each purpose has its connection ("lanes"): a
heartbeat never waits behind a metadata write waiting for its commit, as the controller answers the
requests of one connection in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.metadata.store import MetadataError
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Api, Struct
from gregor.security.inter_broker import ClientSecurity

log = logging.getLogger("gregor.metadata.kraft")


class NoControllerError(MetadataError):
    """No active controller answered in time: the quorum has no leader (it lost its majority), or it is
    unreachable from here."""


class ControllerChannel:
    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], leader: Callable[[], int],
                 retry_backoff_s: float = 0.05, security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.voters = voters
        self._leader = leader
        self.retry_backoff_s = retry_backoff_s
        self._security = security
        self._clients: dict[tuple[int, str], BrokerClient] = {}
        self.closed = False

    def _client(self, controller: int, lane: str) -> BrokerClient:
        c = self._clients.get((controller, lane))
        if c is None or c.closed:
            host, port = self.voters[controller]
            c = BrokerClient(host, port, f"node-{self.node_id}-to-controller-{lane}", max_in_flight=1,
                             connect_timeout_s=2.0, security=self._security)
            self._clients[(controller, lane)] = c
        return c

    async def call(self, api: Api, version: int, body: dict[str, Any], timeout_s: float, lane: str = "writes",
                   retry_errors: tuple[int, ...] = (ErrorCode.NOT_CONTROLLER,)) -> Struct:
        """The active controller's answer (whose error code, if any, is not one of `retry_errors`), or
        NoControllerError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        last = "no leader is known"
        while not self.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            controller = self._leader()
            if controller < 0 or controller not in self.voters:
                last = "the quorum has no leader" if controller < 0 else f"leader {controller} is not a voter"
                await asyncio.sleep(min(self.retry_backoff_s, remaining))
                continue
            client = self._client(controller, lane)
            try:
                resp = await client.request(api, version, body, remaining)
            except (BrokerConnectionError, TimeoutError, OSError) as e:
                client.close()
                last = f"controller {controller}: {str(e) or type(e).__name__}"  # a TimeoutError has no text
                await asyncio.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))
                continue
            code = getattr(resp, "error_code", 0)
            if code in retry_errors:
                last = f"controller {controller} answered {ErrorCode(code).name}"
                await asyncio.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))
                continue
            return resp
        raise NoControllerError(f"{api.name}: no active controller answered within {timeout_s:g} s ({last}); the "
                                "controller quorum may have lost its majority")

    def close(self) -> None:
        self.closed = True
        for c in self._clients.values():
            c.close()
        self._clients.clear()
