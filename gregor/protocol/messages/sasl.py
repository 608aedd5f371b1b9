"""SASL authentication APIs: SaslHandshake (17) and SaslAuthenticate (36, KIP-152).

Kafka 4.0 accepts SaslHandshake v0-1 and SaslAuthenticate v0-2 (flexible from v2). The handshake
names the mechanism and is answered with the listener's enabled mechanisms; SaslAuthenticate then
carries each SASL token in a Kafka request, so failures come back as error codes with a message
instead of a dropped connection. From v1 the final answer carries the session lifetime (KIP-368):
the client must re-authenticate on the connection before it ends.
"""

from __future__ import annotations

from gregor.protocol.schema import BYTES, INT16, INT64, STRING, Array, api, f

SASL_HANDSHAKE = api(
    17,
    "SaslHandshake",
    versions="0-1",
    flexible="none",
    request=[
        f("mechanism", STRING),
    ],
    response=[
        f("error_code", INT16),
        f("mechanisms", Array(STRING)),
    ],
)

SASL_AUTHENTICATE = api(
    36,
    "SaslAuthenticate",
    versions="0-2",
    flexible="2+",
    request=[
        f("auth_bytes", BYTES),
    ],
    response=[
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("auth_bytes", BYTES),
        f("session_lifetime_ms", INT64, "1+", default=0),
    ],
)
