"""KIP-590 forwarding: a broker sends a request only the active controller can answer to it whole, in an
Envelope, on the controller listener; the controller runs it on its Controller and sends the answer back.

Which requests: ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments, whose work is
the partition-leader Controller's (gregor.controller.controller) and so runs where the active controller
is, which in KRaft mode may be a controller-only node no client can reach. The metadata changes a
broker's own handler decides (topics, configs, ACLs, quotas, SCRAM credentials) keep going as
MetadataWrite (gregor.metadata.kraft), the change and not the request.

Authorization happens on the broker, before forwarding, against the ACLs it replayed from the same
metadata log the controller reads: the one handler serves both modes and both places. The Envelope
still carries the client's principal and address (Kafka's fields): the controller logs whom it acts
for. The controller listener is the cluster's own (TLS with client certificates, in a secure cluster),
so an Envelope is taken as the forwarding broker's word.

`Forwarder` is the broker's side, `EnvelopeAnswerer` the controller's. A controller that is not active,
or whose Controller has not taken over yet, answers the Envelope itself NOT_CONTROLLER: the broker's
channel then asks the new one, until the request's timeout.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from gregor.api.context import RequestContext
from gregor.api.handlers.cluster_admin import ControllerOp, alter_reassignments, elect_leaders, list_reassignments
from gregor.controller.controller import Controller
from gregor.metadata.cache import MetadataCache
from gregor.metadata.kraft_channel import ControllerChannel
from gregor.metadata.store import MetadataError
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.frames import decode_request, decode_response, encode_request, encode_response, peek_header
from gregor.protocol.messages.cluster_admin import (
    ALTER_PARTITION_REASSIGNMENTS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
)
from gregor.protocol.messages.kraft_controller import ENVELOPE, ENVELOPE_PRINCIPAL
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Struct

log = logging.getLogger("gregor.api.forwarding")

# What a controller runs from an Envelope, by API key.
FORWARDED: dict[int, ControllerOp] = {
    ELECT_LEADERS.key: elect_leaders,
    ALTER_PARTITION_REASSIGNMENTS.key: alter_reassignments,
    LIST_PARTITION_REASSIGNMENTS.key: list_reassignments,
}


class Forwarder:
    """The broker's side: `await forwarder(ctx, request)` is the active controller's response body.
    Raises KafkaError (REQUEST_TIMED_OUT) when no controller answered within `timeout_s`."""

    def __init__(self, channel: ControllerChannel, timeout_s: float) -> None:
        self.channel = channel
        self.timeout_s = timeout_s

    async def __call__(self, ctx: RequestContext, req: Struct) -> dict[str, Any]:
        header = ctx.header
        api = apis.BY_KEY[header.api_key]
        data = encode_request(api, header.api_version, header.correlation_id, header.client_id, req)[4:]
        principal = ENVELOPE_PRINCIPAL.to_bytes({"type": ctx.principal.principal_type, "name": ctx.principal.name,
                                                 "token_authenticated": False}, 0)
        try:
            host = ipaddress.ip_address(ctx.host).packed
        except ValueError:
            host = b""
        try:
            resp = await self.channel.call(ENVELOPE, 0, {"request_data": data, "request_principal": principal,
                                                         "client_host_address": host}, self.timeout_s, "forward")
        except MetadataError as e:  # no active controller answered in time
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, str(e)) from None
        if resp.error_code != ErrorCode.NONE or resp.response_data is None:
            raise KafkaError(resp.error_code or ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"the active controller refused the forwarded {api.name} request "
                             f"({ErrorCode(resp.error_code).name})")
        _, body = decode_response(resp.response_data, api, header.api_version)
        return body.to_dict()


class EnvelopeAnswerer:
    """The controller's side: the Envelope response to an Envelope request, run on `controller`."""

    def __init__(self, controller: Controller, cache: MetadataCache) -> None:
        self.controller = controller
        self.cache = cache

    async def __call__(self, version: int, body: Struct) -> dict[str, Any]:
        if not self.controller.active:  # the quorum's leader, not yet acting: the broker asks again
            return {"response_data": None, "error_code": ErrorCode.NOT_CONTROLLER}
        frame = memoryview(body.request_data)
        try:
            key, inner_version, _ = peek_header(frame)
            api, op = apis.BY_KEY.get(key), FORWARDED.get(key)
            if api is None or op is None or not api.min_version <= inner_version <= api.max_version:
                log.warning("controller %d: an Envelope with API key %d v%d, which is not forwarded here",
                            self.controller.broker_id, key, inner_version)
                return {"response_data": None, "error_code": ErrorCode.INVALID_REQUEST}
            header, request = decode_request(frame, api)
            who = ENVELOPE_PRINCIPAL.from_bytes(body.request_principal, 0) if body.request_principal else None
        except DecodeError as e:
            log.warning("controller %d: a malformed Envelope: %s", self.controller.broker_id, e)
            return {"response_data": None, "error_code": ErrorCode.INVALID_REQUEST}
        log.debug("controller %d: %s forwarded for %s", self.controller.broker_id, api.name,
                  f"{who.type}:{who.name}" if who is not None else "an unknown principal")
        response = await op(self.controller, self.cache, request)
        chunks = encode_response(api, inner_version, header.correlation_id, response)
        return {"response_data": b"".join(bytes(c) for c in chunks)[4:], "error_code": ErrorCode.NONE}
