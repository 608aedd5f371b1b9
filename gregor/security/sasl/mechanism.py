"""What every server-side SASL mechanism is: a sans-IO object fed client tokens, answering tokens.

A mechanism never touches a socket or a clock of its own: the per-connection authenticator
(gregor.security.sasl.authenticator) hands it each SaslAuthenticate token and the current time,
and sends back what it answers. Two kinds of failure, as Kafka's SaslServerAuthenticator has:

- `SaslAuthenticationError`: its message is meant for the client and is sent verbatim
  (PLAIN's "Authentication failed: Invalid username or password", OAUTHBEARER's JSON status).
- `SaslError`: a protocol or credential failure whose detail stays in the broker log; the client
  gets Kafka's generic "Authentication failed during authentication due to invalid credentials
  with SASL mechanism M", so a client cannot learn which part of its credentials was wrong.
"""

from __future__ import annotations

from typing import Protocol


class SaslAuthenticationError(Exception):
    """Authentication failed; str(e) is sent to the client as the error message."""


class SaslError(Exception):
    """Authentication failed; str(e) is logged, the client gets Kafka's generic message."""


class SaslServer(Protocol):
    """One authentication exchange on the broker side (javax.security.sasl.SaslServer's shape)."""

    mechanism: str

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        """The answer to the client's next token. Raises SaslAuthenticationError or SaslError."""
        ...

    @property
    def complete(self) -> bool:
        """True once the client is authenticated."""
        ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name (the principal's name), once complete."""
        ...

    @property
    def credential_expiration_ms(self) -> int | None:
        """When the credential stops being valid (an OAUTHBEARER token's exp), None if it does not."""
        ...
