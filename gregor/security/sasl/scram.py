"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server exchange.

Credentials are stored salted and hashed only, never the password, in Kafka's text form
`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N` (ScramCredentialUtils) as the user
entity config named after the mechanism (`SCRAM-SHA-256` in /config/users/alice), so a ZooKeeper
written by Kafka and one written by Gregor hold the same thing.

The exchange (no channel binding, as Kafka):
    client-first  n,[a=authzid],n=user,r=cnonce[,ext]
    server-first  r=cnonce+snonce,s=salt,i=iterations
    client-final  c=biws,r=cnonce+snonce[,ext],p=proof
    server-final  v=server-signature
The proof is checked by recomputing H(proof XOR HMAC(StoredKey, AuthMessage)) and comparing it with
StoredKey in constant time. Failures raise SaslError (the client gets Kafka's generic message);
only the authorization-id mismatch is told to the client, as Kafka's ScramSaslServer does. An unknown
user gets a server-first message with a decoy salt and fails at the proof, like a wrong password
(Kafka fails it one step earlier, which tells who exists). The
`tokenauth` extension (delegation tokens) is refused: Gregor has no delegation tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError

# Kafka's bounds (ScramMechanism.minIterations, and AlterUserScramCredentials' upper limit).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True)
class ScramMechanism:
    """A SCRAM mechanism: its name, the number AlterUserScramCredentials uses, and its hash."""

    mechanism_name: str
    type_code: int  # ScramMechanism.type() on the wire: 1 = SHA-256, 2 = SHA-512
    hash_name: str

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hi(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with HMAC over this mechanism's hash."""
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.mechanism_name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type_code: m for m in MECHANISMS.values()}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SaslError(f"invalid base64 in {what}") from None


@dataclass(frozen=True)
class ScramCredential:
    """What the broker stores for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString form."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @staticmethod
    def from_config(text: str) -> ScramCredential:
        """Parse the stored form; raises ValueError if a field is missing or malformed."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            k, sep, v = part.partition("=")
            if not sep:
                raise ValueError(f"invalid SCRAM credential {text!r}")
            fields[k.strip()] = v.strip()
        try:
            return ScramCredential(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"invalid SCRAM credential ({e!r})") from None


def credential_from_salted_password(mech: ScramMechanism, salted_password: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored credential from SaltedPassword = Hi(password, salt, i): what AlterUserScramCredentials sends."""
    client_key = mech.hmac(salted_password, b"Client Key")
    return ScramCredential(salt, mech.hash(client_key), mech.hmac(salted_password, b"Server Key"), iterations)


def credential_from_password(mech: ScramMechanism, password: str, salt: bytes | None = None,
                             iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted_password(mech, mech.hi(password.encode("utf-8"), salt, iterations), salt, iterations)


def sasl_name_decode(name: str) -> str:
    """RFC 5802 saslname: `=2C` is ',' and `=3D` is '='; any other '=' is invalid."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslError(f"invalid saslname {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def sasl_name_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


@dataclass(frozen=True)
class ClientFirstMessage:
    gs2_header: str  # "n,," or "n,a=alice,"
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, part of AuthMessage

    @staticmethod
    def parse(text: str) -> ClientFirstMessage:
        # gs2-cbind-flag "," [authzid] "," client-first-message-bare
        flag, sep1, rest = text.partition(",")
        authz_part, sep2, bare = rest.partition(",")
        if not sep1 or not sep2:
            raise SaslError(f"invalid SCRAM client first message: {text!r}")
        if flag != "n":
            raise SaslError(f"SCRAM channel binding is not supported (gs2 flag {flag!r})")
        authzid = ""
        if authz_part:
            if not authz_part.startswith("a="):
                raise SaslError(f"invalid SCRAM authorization id: {authz_part!r}")
            authzid = sasl_name_decode(authz_part[2:])
        parts = bare.split(",")
        if parts[0].startswith("m="):
            raise SaslError("SCRAM mandatory extensions (m=) are not supported")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
            raise SaslError(f"invalid SCRAM client first message: {text!r}")
        username = sasl_name_decode(parts[0][2:])
        nonce = parts[1][2:]
        if not username or not nonce:
            raise SaslError("SCRAM client first message without user name or nonce")
        # Kafka's extensions (KIP-84 tokenauth) are key=value pairs with alphabetic keys.
        extensions = _kafka_extensions(parts[2:])
        return ClientFirstMessage(f"{flag},{authz_part},", authzid, username, nonce, extensions, bare)


def _kafka_extensions(parts: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in parts:
        k, sep, v = p.partition("=")
        if not sep or not k.isalpha():
            raise SaslError(f"invalid SCRAM extension {p!r}")
        out[k] = v
    return out


@dataclass(frozen=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str

    @staticmethod
    def parse(text: str) -> ClientFinalMessage:
        head, sep, proof = text.rpartition(",p=")
        if not sep:
            raise SaslError("SCRAM client final message without proof")
        parts = head.split(",")
        if len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise SaslError(f"invalid SCRAM client final message: {head!r}")
        return ClientFinalMessage(_unb64(parts[0][2:], "channel binding"), parts[1][2:],
                                  _unb64(proof, "client proof"), head)


_DECOY_KEY = secrets.token_bytes(32)  # per process: a decoy salt is stable for a user name, unpredictable across runs


def _decoy_credential(mech: ScramMechanism, username: str) -> ScramCredential:
    """A credential for a user that has none: its salt looks like a real one and never changes for the name."""
    salt = hmac.new(_DECOY_KEY, f"{mech.mechanism_name}:{username}".encode(), "sha256").digest()
    key = mech.hash(salt)
    return ScramCredential(salt, key, key, DEFAULT_ITERATIONS)


class ScramServer:
    """One SCRAM exchange. `credential_of(user)` is the stored credential, None if the user has none."""

    def __init__(self, mech: ScramMechanism, credential_of: Callable[[str], ScramCredential | None],
                 nonce_factory: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mech = mech
        self.mechanism = mech.mechanism_name
        self._credential_of = credential_of
        self._nonce_factory = nonce_factory
        self._state = "client_first"
        self._client_first: ClientFirstMessage | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._authorization_id = ""
        self._unknown_user = False

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        return self._authorization_id

    @property
    def credential_expiration_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            self._state = "failed"
            raise SaslError("SCRAM message is not UTF-8") from None
        try:
            if self._state == "client_first":
                return self._on_client_first(text)
            if self._state == "client_final":
                return self._on_client_final(text)
            raise SaslError(f"unexpected SCRAM message in state {self._state}")
        except (SaslError, SaslAuthenticationError):
            self._state = "failed"
            raise

    def _on_client_first(self, text: str) -> bytes:
        first = ClientFirstMessage.parse(text)
        unsupported = set(first.extensions) - {"tokenauth"}
        if unsupported:
            raise SaslError(f"Unsupported extensions will not be accepted: {sorted(unsupported)}")
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise SaslError("delegation token authentication (tokenauth) is not supported")
        credential = self._credential_of(first.username)
        if credential is None:
            # Answer as for a real user, with a salt stable per user name, and fail at the proof: whether a
            # user exists is not told by the step at which the exchange fails (RFC 5802 section 5.1).
            self._unknown_user = True
            credential = _decoy_credential(self.mech, first.username)
        if first.authzid and first.authzid != first.username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslError(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                            f"for {self.mechanism}")
        self._client_first = first
        self._credential = credential
        self._nonce = first.nonce + self._nonce_factory()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "client_final"
        return self._server_first.encode("utf-8")

    def _on_client_final(self, text: str) -> bytes:
        final = ClientFinalMessage.parse(text)
        first, cred = self._client_first, self._credential
        assert first is not None and cred is not None
        # Kafka accepts a final nonce that ends with the server's (librdkafka before 2.1 sends the client nonce
        # in front of the whole server nonce); the proof covers whatever was sent, as it is part of AuthMessage.
        if not final.nonce.endswith(self._nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        if not hmac.compare_digest(final.channel_binding, first.gs2_header.encode("utf-8")):
            raise SaslError("SCRAM channel binding does not match the client's gs2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        client_signature = self.mech.hmac(cred.stored_key, auth_message)
        if len(final.proof) != len(client_signature):
            raise SaslError("Invalid client credentials (proof of the wrong length)")
        client_key = bytes(a ^ b for a, b in zip(final.proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mech.hash(client_key), cred.stored_key) or self._unknown_user:
            if self._unknown_user:
                raise SaslError(f"Authentication failed: Invalid user credentials (no {self.mechanism} credential "
                                f"for user {first.username!r})")
            raise SaslError(f"Invalid client credentials for user {first.username!r}")
        server_signature = self.mech.hmac(cred.server_key, auth_message)
        self._authorization_id = first.username
        self._state = "complete"
        return f"v={_b64(server_signature)}".encode()
