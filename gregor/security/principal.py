"""Who sent a request: Kafka's KafkaPrincipal (`User:alice`), as ACLs and quotas name it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """'User:alice' -> KafkaPrincipal('User', 'alice'). The name may itself contain ':' (a DN rarely
        does, a SCRAM user may); the type may not. Raises ValueError for text without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind.strip():
            raise ValueError(f"{text!r} is not a principal of the form Type:name (for example User:alice)")
        return cls(kind.strip(), name)


# Whoever connects through a listener that authenticates nobody (PLAINTEXT, SSL without a client certificate).
ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: a user or client-id as stored in entity names (/config/users/<name>): URL
    encoding of its UTF-8 that keeps letters, digits and `-._` only, spaces as %20. SCRAM credentials and
    quotas of one user share that entity."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)
