"""Sending a transaction's commit or abort markers to the leaders of its partitions (Kafka's
TransactionMarkerChannelManager).

After the coordinator has written PREPARE_COMMIT or PREPARE_ABORT, every partition of the
transaction must get its marker before COMPLETE_* is written. Partitions are grouped by their
current leader: this broker's own partitions are written directly (`write_local`, the same path
WriteTxnMarkers takes), others get a WriteTxnMarkers request over an inter-broker connection.
Leadership moves, missing replicas and lost connections are retried every `retry_backoff_ms` until
every marker is in, the coordinator is no longer the coordinator (its successor resumes from the
PREPARE record), or a partition's topic is deleted (its marker is moot).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.transactions import WRITE_TXN_MARKERS
from gregor.security.inter_broker import ClientSecurity

log = logging.getLogger("gregor.txn.markers")

TopicPartition = tuple[str, int]
WriteLocal = Callable[[int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]

# Errors after which a marker is not retried: the partition has moved past this producer epoch or
# this coordinator (a newer coordinator or producer epoch wrote there), or it cannot take markers.
_GIVE_UP = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.INVALID_REQUEST, ErrorCode.CORRUPT_MESSAGE,
            ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_TOPIC_EXCEPTION}


class TxnMarkerSender:
    def __init__(self, broker_id: int, leader_of: Callable[[str, int], int | None],
                 address_of: Callable[[int], tuple[str, int] | None], topic_exists: Callable[[str], bool],
                 write_local: WriteLocal, retry_backoff_ms: int = 100, request_timeout_ms: int = 30_000,
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.security = security
        self._leader_of = leader_of
        self._address_of = address_of
        self._topic_exists = topic_exists
        self._write_local = write_local
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._clients: dict[int, BrokerClient] = {}

    async def send(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                   partitions: set[TopicPartition], still_coordinator: Callable[[], bool]) -> bool:
        """Write the markers; True once every partition has its marker (or is gone), False if this
        broker stopped being the transaction's coordinator first."""
        remaining = set(partitions)
        attempt = 0
        while remaining:
            if not still_coordinator():
                return False
            for tp in [tp for tp in remaining if not self._topic_exists(tp[0])]:
                log.info("transaction marker for %s-%d dropped: the topic is gone", *tp)
                remaining.discard(tp)
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self._leader_of(*tp)
                if leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            calls = [self._send_to(b, producer_id, producer_epoch, commit, coordinator_epoch, tps)
                     for b, tps in by_leader.items()]
            for result in await asyncio.gather(*calls):
                for tp, code in result.items():
                    if code == ErrorCode.NONE:
                        remaining.discard(tp)
                    elif code in _GIVE_UP:
                        log.warning("transaction marker of producer %d epoch %d for %s-%d refused: %s; not retried",
                                    producer_id, producer_epoch, tp[0], tp[1], code.name)
                        remaining.discard(tp)
            if remaining:
                attempt += 1
                if attempt % 50 == 0:
                    log.warning("transaction markers of producer %d still pending for %s after %d attempts",
                                producer_id, sorted(remaining)[:5], attempt)
                await asyncio.sleep(self.retry_backoff_ms / 1000)
        return True

    async def _send_to(self, broker: int, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        if broker == self.broker_id:
            return await self._write_local(producer_id, producer_epoch, commit, coordinator_epoch, tps)
        client = await self._client(broker)
        if client is None:
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in tps}
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                             "coordinator_epoch": coordinator_epoch}]}
        try:
            resp: Any = await client.request(WRITE_TXN_MARKERS, 1, body, timeout_s=self.request_timeout_ms / 1000)
        except (BrokerConnectionError, TimeoutError) as e:
            log.info("WriteTxnMarkers to broker %d failed (%s); retrying", broker, e)
            self._drop(broker)
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in tps}
        out: dict[TopicPartition, ErrorCode] = {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in tps}
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return out

    async def _client(self, broker: int) -> BrokerClient | None:
        c = self._clients.get(broker)
        if c is not None and not c.closed:
            return c
        addr = self._address_of(broker)
        if addr is None:
            return None
        c = self._clients[broker] = BrokerClient(addr[0], addr[1], f"broker-{self.broker_id}-txn-markers",
                                                 security=self.security)
        try:
            await c.connect()
        except BrokerConnectionError:
            self._drop(broker)
            return None
        return c

    def _drop(self, broker: int) -> None:
        c = self._clients.pop(broker, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for b in list(self._clients):
            self._drop(b)
