"""Sans-IO SASL clients for PLAIN and SCRAM: what a broker sends when it authenticates to another.

The inter-broker client (and tests) drive them the same way whatever the mechanism:

    client = sasl_client("SCRAM-SHA-256", "broker", "broker-secret")
    token = client.first_message()
    while token is not None:
        reply = <SaslAuthenticate(token)>.auth_bytes   # raise on an error code
        token = client.evaluate(reply)
    assert client.complete

`evaluate` returns the next token to send, or None once the exchange is over; it raises
SaslClientError when the server's answer is malformed or (SCRAM) its signature does not prove
that the server knows the credential: a broker never trusts a peer that merely said "ok".
"""

from __future__ import annotations

import base64
import hmac
import secrets

from gregor.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from gregor.security.sasl.scram import ScramMechanism, sasl_name_encode


class SaslClientError(Exception):
    """The server's answer does not complete a valid exchange."""


class PlainClient:
    mechanism = "PLAIN"

    def __init__(self, username: str, password: str, authorization_id: str = "") -> None:
        self.username = username
        self.password = password
        self.authorization_id = authorization_id
        self.complete = False

    def first_message(self) -> bytes:
        return f"{self.authorization_id}\x00{self.username}\x00{self.password}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The server's (empty) answer to the single PLAIN message ends the exchange."""
        if self.complete:
            raise SaslClientError("PLAIN exchange already complete")
        self.complete = True
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        mech = SCRAM_MECHANISMS.get(mechanism)
        if mech is None:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mech: ScramMechanism = mech
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self.nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self.complete = False
        self._state = "first"
        self._client_first_bare = f"n={sasl_name_encode(username)},r={self.nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state == "first":
            return self._client_final(challenge)
        if self._state == "final":
            self._verify_server_final(challenge)
            return None
        raise SaslClientError(f"unexpected SCRAM server message in state {self._state}")

    def _client_final(self, server_first_bytes: bytes) -> bytes:
        server_first = server_first_bytes.decode("utf-8", "replace")
        attrs = dict(p.split("=", 1) for p in server_first.split(",") if "=" in p)
        if "e" in attrs:
            raise SaslClientError(f"SCRAM server error: {attrs['e']}")
        try:
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"], validate=True), int(attrs["i"])
        except (KeyError, ValueError) as e:
            raise SaslClientError(f"invalid SCRAM server first message {server_first!r}: {e!r}") from None
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise SaslClientError("SCRAM server nonce does not extend the client nonce")
        if iterations < 1:
            raise SaslClientError(f"invalid SCRAM iteration count {iterations}")
        salted = self.mech.hi(self.password.encode("utf-8"), salt, iterations)
        client_key = self.mech.hmac(salted, b"Client Key")
        stored_key = self.mech.hash(client_key)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = self.mech.hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self.mech.hmac(self.mech.hmac(salted, b"Server Key"), auth_message)
        self._state = "final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final_bytes: bytes) -> None:
        text = server_final_bytes.decode("utf-8", "replace")
        if text.startswith("e="):
            raise SaslClientError(f"SCRAM server error: {text[2:]}")
        if not text.startswith("v="):
            raise SaslClientError(f"invalid SCRAM server final message {text!r}")
        try:
            signature = base64.b64decode(text[2:], validate=True)
        except ValueError:
            raise SaslClientError("invalid base64 in the SCRAM server signature") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("SCRAM server signature is invalid: the server does not know the credential")
        self._state = "done"
        self.complete = True


SaslClient = PlainClient | ScramClient


def sasl_client(mechanism: str, username: str, password: str) -> SaslClient:
    """A client for `mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."""
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise ValueError(f"no SASL client for mechanism {mechanism!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
