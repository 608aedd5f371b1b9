"""SASL/PLAIN (RFC 4616), server side: one message `authzid NUL authcid NUL passwd`.

Users and passwords come from the PLAIN login module's JAAS options `user_NAME="password"`
(Kafka's PlainServerCallbackHandler). Passwords are compared in constant time, and an unknown
user costs the same comparison as a wrong password, so timing tells nothing about who exists.
The error texts are Kafka's PlainSaslServer ones; they go to the client as they are.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError

MECHANISM = "PLAIN"
_DUMMY_PASSWORD = b"\x00" * 32


def users_from_jaas_options(options: dict[str, str]) -> dict[str, str]:
    """{user: password} from the `user_NAME` options of a PlainLoginModule entry."""
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_") and len(k) > len("user_")}


class PlainServer:
    """One PLAIN exchange. `password_of(user)` is the configured password, or None if unknown."""

    mechanism = MECHANISM

    def __init__(self, password_of: Callable[[str], str | None]) -> None:
        self._password_of = password_of
        self._complete = False
        self._authorization_id = ""

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        return self._authorization_id

    @property
    def credential_expiration_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        if self._complete:
            raise SaslError("PLAIN authentication already complete")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._password_of(username)
        expected_bytes = expected.encode("utf-8") if expected is not None else _DUMMY_PASSWORD
        ok = hmac.compare_digest(expected_bytes, password.encode("utf-8"))
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._authorization_id = username
        self._complete = True
        return b""
