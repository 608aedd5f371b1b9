"""TLS for listeners and for the broker's own connections to peers, from Python's ssl module and PEM files.

Kafka's PEM options map to the ssl module as follows: `ssl.keystore.location` (key and certificate chain
in one PEM file, the key encrypted with `ssl.key.password` or not) or the inline `ssl.keystore.key` +
`ssl.keystore.certificate.chain`; `ssl.truststore.location` or inline `ssl.truststore.certificates`;
`ssl.client.auth` none/requested/required -> CERT_NONE/CERT_OPTIONAL/CERT_REQUIRED; `ssl.enabled.protocols`
-> the lowest and highest version allowed (TLS 1.2 and 1.3 by default, so a TLS 1.0 client fails the
handshake); `ssl.cipher.suites` -> set_ciphers (TLS 1.2 suites; TLS 1.3's are fixed by OpenSSL).

Reloading without a restart: a listener keeps one `ServerTls`. Its front context is the one the listening
socket was created with; its SNI callback (called for every ClientHello, with or without SNI) hands each
new connection the newest context, so replacing the certificate or the trusted CAs takes effect for
connections that start after the reload, while established ones keep theirs, as in Kafka.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gregor.configdef import ConfigError

if TYPE_CHECKING:
    from gregor.security.listeners import BrokerListeners


class ListenerProps(Protocol):
    """What listener properties are read from: BrokerConfig, or the dynamic configs over it."""

    def listener_get(self, listener: str, key: str, mechanism: str | None = None) -> Any: ...

log = logging.getLogger("gregor.tls")

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class TlsSettings:
    """A listener's (or the inter-broker client's) TLS properties, resolved through listener prefixes."""

    keystore_location: str | None
    key_password: str | None
    keystore_key: str | None
    keystore_chain: str | None
    truststore_location: str | None
    truststore_certificates: str | None
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    principal_mapping_rules: str
    endpoint_identification: str

    @classmethod
    def from_config(cls, config: ListenerProps, listener: str) -> TlsSettings:
        def g(key: str) -> Any:
            v = config.listener_get(listener, key)
            return None if v == "" else v  # an empty listener override unsets the broker-wide value

        if g("ssl.keystore.password") is not None:
            raise ConfigError(f"listener {listener}: ssl.keystore.password is not used with PEM key stores "
                              f"(Kafka rejects it); an encrypted key takes ssl.key.password")
        return cls(g("ssl.keystore.location"), g("ssl.key.password"), g("ssl.keystore.key"),
                   g("ssl.keystore.certificate.chain"), g("ssl.truststore.location"), g("ssl.truststore.certificates"),
                   g("ssl.client.auth") or "none", tuple(g("ssl.enabled.protocols") or ()),
                   tuple(g("ssl.cipher.suites") or ()),
                   g("ssl.principal.mapping.rules") or "DEFAULT", g("ssl.endpoint.identification.algorithm") or "")

    def files(self) -> list[str]:
        return [p for p in (self.keystore_location, self.truststore_location) if p]


def _versions(protocols: tuple[str, ...]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    if not protocols:
        raise ConfigError("ssl.enabled.protocols: at least one TLS version is required")
    chosen = sorted(_VERSIONS[p] for p in protocols)
    return chosen[0], chosen[-1]


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings, what: str) -> None:
    password = s.key_password
    if s.keystore_location:
        try:
            ctx.load_cert_chain(s.keystore_location, password=password)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"{what}: cannot load ssl.keystore.location {s.keystore_location}: {e}") from None
        return
    if s.keystore_key or s.keystore_chain:
        if not (s.keystore_key and s.keystore_chain):
            raise ConfigError(f"{what}: ssl.keystore.key and ssl.keystore.certificate.chain go together")
        # load_cert_chain reads files only: the inline PEM goes through a private temporary file.
        fd, path = tempfile.mkstemp(prefix="gregor-keystore-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(s.keystore_key.strip() + "\n" + s.keystore_chain.strip() + "\n")
            ctx.load_cert_chain(path, password=password)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"{what}: cannot load the inline ssl.keystore.key / certificate chain: {e}") from None
        finally:
            os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, s: TlsSettings, what: str) -> bool:
    try:
        if s.truststore_location:
            ctx.load_verify_locations(cafile=s.truststore_location)
            return True
        if s.truststore_certificates:
            ctx.load_verify_locations(cadata=s.truststore_certificates)
            return True
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{what}: cannot load the trust store: {e}") from None
    return False


def build_server_context(s: TlsSettings, what: str) -> ssl.SSLContext:
    """A listener's server context. Raises ConfigError naming what is wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = _versions(s.enabled_protocols)
    if s.cipher_suites:
        try:
            ctx.set_ciphers(":".join(s.cipher_suites))
        except ssl.SSLError as e:
            raise ConfigError(f"{what}: ssl.cipher.suites {','.join(s.cipher_suites)}: {e}") from None
    if not (s.keystore_location or s.keystore_key):
        raise ConfigError(f"{what}: a TLS listener needs ssl.keystore.location (or ssl.keystore.key and "
                          f"ssl.keystore.certificate.chain)")
    _load_keystore(ctx, s, what)
    trusted = _load_truststore(ctx, s, what)
    ctx.verify_mode = _CLIENT_AUTH[s.client_auth]
    if s.client_auth != "none" and not trusted:
        raise ConfigError(f"{what}: ssl.client.auth={s.client_auth} needs ssl.truststore.location "
                          f"(the CAs client certificates must chain to)")
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


def build_client_context(s: TlsSettings, what: str) -> ssl.SSLContext:
    """The context a broker connects to a peer with: it trusts the trust store, presents its own
    certificate when it has one (for peers requiring client auth) and checks the peer's host name
    when ssl.endpoint.identification.algorithm is https."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version, ctx.maximum_version = _versions(s.enabled_protocols)
    if s.cipher_suites:
        ctx.set_ciphers(":".join(s.cipher_suites))
    if not _load_truststore(ctx, s, what):
        ctx.load_default_certs()
    if s.keystore_location or s.keystore_key:
        _load_keystore(ctx, s, what)
    ctx.check_hostname = s.endpoint_identification.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def check_listener_tls(config: BrokerListeners) -> None:
    """Build every TLS listener's context once: raises ConfigError naming the listener and the file."""
    for spec in config.listener_specs:
        if spec.uses_tls:
            build_server_context(TlsSettings.from_config(config, spec.name), f"listener {spec.name}")


def certificate_identity(s: TlsSettings) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """The subject and subject alternative names of the key store's (first) certificate, what a key
    store rotation must keep (Kafka's check, without ssl.allow.dn.changes); None without one."""
    path, tmp = s.keystore_location, None
    if not path and s.keystore_chain:
        fd, tmp = tempfile.mkstemp(suffix=".pem")
        with os.fdopen(fd, "w") as fh:
            fh.write(s.keystore_chain)
        path = tmp
    if not path:
        return None
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]  # the stdlib's PEM decoder
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{path}: no certificate: {e}") from None
    finally:
        if tmp is not None:
            os.unlink(tmp)
    return distinguished_name(decoded), tuple(sorted(decoded.get("subjectAltName", ())))


class ServerTls:
    """A TLS listener's context, reloadable: `context` is given to the listening socket once; every new
    connection is switched to the newest context by its SNI callback."""

    def __init__(self, settings: TlsSettings, what: str) -> None:
        self.what = what
        self.settings = settings
        self.current = build_server_context(settings, what)
        self.context = build_server_context(settings, what)
        self.context.sni_callback = self._pick
        self.mapper = PrincipalMapper.parse(settings.principal_mapping_rules)
        self._stamps = self._file_stamps()

    def _pick(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        if self.current is not ctx:
            sslobj.context = self.current
        return None

    def _file_stamps(self) -> tuple[tuple[str, float, int], ...]:
        out = []
        for p in self.settings.files():
            try:
                st = os.stat(p)
                out.append((p, st.st_mtime, st.st_size))
            except OSError:
                out.append((p, -1.0, -1))
        return tuple(out)

    def reload(self, settings: TlsSettings | None = None) -> bool:
        """Rebuild from `settings` (or the same files, re-read). A bad new key store keeps the old one
        serving and is logged: a reload never takes a listener down. Returns whether it changed."""
        s = settings or self.settings
        try:
            ctx = build_server_context(s, self.what)
            mapper = PrincipalMapper.parse(s.principal_mapping_rules)
        except ConfigError as e:
            log.error("TLS reload of %s failed, keeping the previous certificates: %s", self.what, e)
            return False
        self.settings, self.current, self.mapper = s, ctx, mapper
        self._stamps = self._file_stamps()
        log.info("TLS key store and trust store of %s reloaded", self.what)
        return True

    def reload_if_changed(self) -> bool:
        """Reload when a key store or trust store file changed (mtime or size) since the last load."""
        if self._file_stamps() == self._stamps:
            return False
        return self.reload()


# --- certificate principals ---------------------------------------------------------------

def distinguished_name(cert: dict[str, Any]) -> str:
    """A peer certificate's subject as Kafka shows it (RFC 2253: most specific first, `CN=a,OU=b,O=c`).
    The ssl module gives the subject in certificate order (country first)."""
    names = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET", "domainComponent": "DC",
             "userId": "UID", "emailAddress": "EMAILADDRESS"}
    rdns = []
    for rdn in cert.get("subject", ()):
        parts = []
        for key, value in rdn:
            v = re.sub(r'([,+"\\<>;])', r"\\\1", str(value))
            parts.append(f"{names.get(key, key)}={v}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"


class PrincipalMapper:
    """ssl.principal.mapping.rules: `RULE:pattern/replacement/[LU]`, ..., `DEFAULT`. The first rule whose
    pattern matches the whole DN gives the name; DEFAULT gives the DN itself. No match: the DN."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        rules: list[_Rule] = []
        rest = (text or "DEFAULT").strip()
        token = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")
        pos = 0
        while pos < len(rest):
            m = token.match(rest, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot parse {rest[pos:]!r} (expected "
                                  f"RULE:pattern/replacement/[LU] or DEFAULT)")
            if m.group(1):
                rules.append(_Rule(None, "", ""))
            else:
                try:
                    pattern = re.compile(m.group(2))
                except re.error as e:
                    raise ConfigError(f"ssl.principal.mapping.rules: bad pattern {m.group(2)!r}: {e}") from None
                rules.append(_Rule(pattern, m.group(3), m.group(4)))
            pos = m.end()
        return cls(rules)

    def name(self, dn: str) -> str:
        for r in self.rules:
            if r.pattern is None:
                return dn
            m = r.pattern.fullmatch(dn)
            if m is None:
                continue
            groups = m
            out = re.sub(r"\$(\d+)", lambda g, groups=groups: groups.group(int(g.group(1))) or "", r.replacement)
            return out.lower() if r.case == "L" else out.upper() if r.case == "U" else out
        return dn


def peer_principal_name(sslobj: Any, mapper: PrincipalMapper) -> str | None:
    """The mapped subject of the client's verified certificate, or None when it sent none."""
    cert = sslobj.getpeercert() if sslobj is not None else None
    if not cert:
        return None
    return mapper.name(distinguished_name(cert))


