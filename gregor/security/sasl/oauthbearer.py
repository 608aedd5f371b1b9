"""SASL/OAUTHBEARER (RFC 7628), server side, with Kafka's unsecured-JWS validator as the default check.

The client's one message is `n,[a=authzid],` %x01 `auth=Bearer <token>` %x01 [key=value %x01]... %x01.
The token is handed to a validator; what validates a token is configurable, as Kafka's
`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class` is: here that config names a
Python factory (`package.module:name` or `package.module.name`) called once with the OAUTHBEARER
login module's JAAS options, returning `validate(token, now_ms) -> OAuthBearerToken` that raises
`OAuthBearerValidationError` to refuse. Unset, the unsecured validator below is used.

On refusal the broker answers, as RFC 7628 section 3.2.2 and Kafka do, with a JSON error
(`{"status":"invalid_token"}`) instead of failing at once; the client acknowledges with a single
%x01 and only then does authentication fail, with that JSON as the error message.

Kafka's unsecured validator (OAuthBearerUnsecuredValidatorCallbackHandler), reproduced: the token
is an unsecured JWS (`alg` "none", empty signature) whose claims carry the principal
(`unsecuredValidatorPrincipalClaimName`, default `sub`), `exp` (required) and optionally `iat`, both
NumericDates in seconds, checked with `unsecuredValidatorAllowableClockSkewMs` (default 0) of
slack, and a scope claim (`unsecuredValidatorScopeClaimName`, default `scope`) that must contain
every entry of `unsecuredValidatorRequiredScope` (space-separated, default none).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError

MECHANISM = "OAUTHBEARER"
PRINCIPAL_CLAIM_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
CLOCK_SKEW_OPTION = "unsecuredValidatorAllowableClockSkewMs"
_KEY = re.compile(r"[A-Za-z]+")
_BEARER = re.compile(r"Bearer[ \t]+([-_.~+/A-Za-z0-9]+=*)")


@dataclass(frozen=True)
class OAuthBearerToken:
    """A validated token: who it names, what it allows, until when (ms since the epoch)."""

    value: str
    principal_name: str
    lifetime_ms: int
    scope: frozenset[str] = frozenset()
    start_time_ms: int | None = None
    claims: dict[str, Any] = field(default_factory=dict)


class OAuthBearerValidationError(Exception):
    """A refused token. `status` (RFC 6750's error code) and `scope` go into the JSON answer;
    the message stays in the broker log."""

    def __init__(self, message: str, status: str = "invalid_token", scope: str | None = None,
                 openid_configuration: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.scope = scope
        self.openid_configuration = openid_configuration

    def json_error(self) -> str:
        out: dict[str, str] = {"status": self.status}
        if self.scope is not None:
            out["scope"] = self.scope
        if self.openid_configuration is not None:
            out["openid-configuration"] = self.openid_configuration
        return json.dumps(out, separators=(",", ":"))


Validator = Callable[[str, int], OAuthBearerToken]
ValidatorFactory = Callable[[dict[str, str]], Validator]


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as e:
        raise OAuthBearerValidationError(f"the JWS {what} is not Base64URL-encoded JSON: {e}") from None
    if not isinstance(value, dict):
        raise OAuthBearerValidationError(f"the JWS {what} is not a JSON object")
    return value


def _numeric_date_ms(claims: dict[str, Any], name: str, required: bool) -> int | None:
    v = claims.get(name)
    if v is None:
        if required:
            raise OAuthBearerValidationError(f"Required claim missing: {name}")
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise OAuthBearerValidationError(f"The {name} claim is not a number: {v!r}")
    return int(v * 1000)


def _scope_of(claims: dict[str, Any], name: str) -> frozenset[str]:
    v = claims.get(name)
    if v is None:
        return frozenset()
    if isinstance(v, str):
        return frozenset(s for s in v.split(" ") if s)
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return frozenset(s for s in v if s)
    raise OAuthBearerValidationError(f"The {name} claim is neither a string nor a list of strings")


def unsecured_validator(options: dict[str, str]) -> Validator:
    """Kafka's default: accept unsecured JWS tokens (see the module docstring). Raises ValueError
    for an invalid option, at startup."""
    principal_claim = options.get(PRINCIPAL_CLAIM_OPTION, "").strip() or "sub"
    scope_claim = options.get(SCOPE_CLAIM_OPTION, "").strip() or "scope"
    required_scope = frozenset(s for s in options.get(REQUIRED_SCOPE_OPTION, "").split(" ") if s)
    skew_text = options.get(CLOCK_SKEW_OPTION, "").strip() or "0"
    try:
        skew_ms = int(skew_text)
    except ValueError:
        skew_ms = -1
    if skew_ms < 0:
        raise ValueError(f"Invalid value for {CLOCK_SKEW_OPTION} option: {skew_text!r} (a non-negative integer)")

    def validate(token: str, now_ms: int) -> OAuthBearerToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise OAuthBearerValidationError(
                f"Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values "
                f"(found {len(parts)})")
        if parts[2]:
            raise OAuthBearerValidationError("Unsecured JWS must have an empty signature")
        header = _b64url_json(parts[0], "header")
        if header.get("alg") != "none":
            raise OAuthBearerValidationError(f"Unsecured JWS must have alg \"none\" (found {header.get('alg')!r})")
        claims = _b64url_json(parts[1], "payload")
        principal = claims.get(principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise OAuthBearerValidationError(f"Required claim missing or empty: {principal_claim}")
        exp_ms = _numeric_date_ms(claims, "exp", required=True)
        iat_ms = _numeric_date_ms(claims, "iat", required=False)
        assert exp_ms is not None
        if iat_ms is not None and now_ms + skew_ms < iat_ms:
            raise OAuthBearerValidationError(
                f"The Issued At value ({iat_ms}) is after the current time ({now_ms}) plus the allowable clock "
                f"skew ({skew_ms})")
        if now_ms - skew_ms >= exp_ms:
            raise OAuthBearerValidationError(
                f"The current time ({now_ms}) minus the allowable clock skew ({skew_ms}) is on or after the "
                f"Expiration Time value ({exp_ms})")
        if iat_ms is not None and exp_ms <= iat_ms:
            raise OAuthBearerValidationError(
                f"The Expiration Time ({exp_ms}) is not after the Issued At time ({iat_ms})")
        scope = _scope_of(claims, scope_claim)
        missing = required_scope - scope
        if missing:
            raise OAuthBearerValidationError(
                f"The provided scope ({' '.join(sorted(scope))}) is missing required scope "
                f"({' '.join(sorted(missing))})", status="insufficient_scope", scope=" ".join(sorted(required_scope)))
        return OAuthBearerToken(token, principal, exp_ms, scope, iat_ms, claims)

    return validate


def load_validator_factory(name: str | None) -> ValidatorFactory:
    """The factory named by `sasl.server.callback.handler.class` (unset: the unsecured validator).
    Raises ValueError when it cannot be imported."""
    if not name:
        return unsecured_validator
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"cannot load the OAUTHBEARER validator {name!r}: {e}") from None
    if not callable(factory):
        raise ValueError(f"the OAUTHBEARER validator {name!r} is not callable")
    return factory  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ClientInitialResponse:
    authzid: str
    token: str
    extensions: dict[str, str]

    @staticmethod
    def parse(data: bytes) -> ClientInitialResponse:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("OAUTHBEARER client message is not UTF-8") from None
        flag, sep1, rest = text.partition(",")
        authz, sep2, rest = rest.partition(",")
        if flag != "n" or not sep1 or not sep2:
            raise SaslError("Invalid OAUTHBEARER client first message: bad GS2 header")
        if authz and not authz.startswith("a="):
            raise SaslError("Invalid OAUTHBEARER client first message: bad authorization id")
        authzid = authz[2:].replace("=2C", ",").replace("=3D", "=")
        if not rest.startswith("\x01") or not rest.endswith("\x01\x01"):
            raise SaslError("Invalid OAUTHBEARER client first message: bad key/value framing")
        pairs: dict[str, str] = {}
        for kv in rest[1:-2].split("\x01") if len(rest) > 2 else []:
            k, sep, v = kv.partition("=")
            if not sep or not _KEY.fullmatch(k):
                raise SaslError(f"Invalid OAUTHBEARER key/value pair {kv[:40]!r}")
            pairs[k] = v
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslError("Invalid OAUTHBEARER client first message: no auth=Bearer token")
        m = _BEARER.fullmatch(auth)
        if m is None:
            raise SaslError("Invalid OAUTHBEARER client first message: auth is not 'Bearer <token>'")
        return ClientInitialResponse(authzid, m.group(1), pairs)


class OAuthBearerServer:
    """One OAUTHBEARER exchange, the token checked by `validate(token, now_ms)`."""

    mechanism = MECHANISM

    def __init__(self, validate: Validator) -> None:
        self._validate = validate
        self._complete = False
        self._error_json: str | None = None
        self.failure_detail: str | None = None  # why the token was refused, for the broker log
        self.token: OAuthBearerToken | None = None
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        return self.token.principal_name if self.token is not None else ""

    @property
    def credential_expiration_ms(self) -> int | None:
        return self.token.lifetime_ms if self.token is not None else None

    def evaluate(self, data: bytes, now_ms: int) -> bytes:
        if self._complete:
            raise SaslError("OAUTHBEARER authentication already complete")
        if self._error_json is not None:
            if data == b"\x01":  # the client's acknowledgement of our error answer
                raise SaslAuthenticationError(self._error_json)
            raise SaslError("OAUTHBEARER client did not acknowledge the error answer with %x01")
        response = ClientInitialResponse.parse(data)
        try:
            token = self._validate(response.token, now_ms)
        except OAuthBearerValidationError as e:
            self._error_json = e.json_error()
            self.failure_detail = str(e)
            return self._error_json.encode("utf-8")
        if response.authzid and response.authzid != token.principal_name:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({response.authzid}) that is "
                f"different from the token's principal name ({token.principal_name})")
        self.token = token
        self.extensions = response.extensions
        self._complete = True
        return b""
