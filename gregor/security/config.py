"""The broker properties of listeners, TLS, SASL, authorization and quotas (Kafka's names and defaults).

They join the broker's one table (gregor.config.BROKER_PROPS). Properties that Kafka lets a listener
override (`listener.name.<listener>.<property>`, and for SASL `listener.name.<listener>.<mechanism>.<property>`)
are read through `BrokerConfig.listener_get`; which ones may be overridden is `listener_overridable`.
"""

from __future__ import annotations

from typing import Any

from gregor.configdef import PER_BROKER, READ_ONLY, Prop


def _p(name: str, type_: str, default: Any, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] | None = None, doc: str = "", mode: str = READ_ONLY, sensitive: bool = False) -> Prop:
    return Prop(name, type_, default, lo, hi, choices, doc, mode, sensitive)


TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")

SECURITY_PROPS: list[Prop] = [
    # --- listeners and TLS ---
    _p("listener.security.protocol.map", "list",
       ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"], mode=PER_BROKER,
       doc="The security protocol of each listener name, NAME:PROTOCOL; a name that is a protocol maps to itself"),
    _p("inter.broker.listener.name", "string", None, mode=PER_BROKER,
       doc="The listener brokers use to talk to each other; unset: the one of security.inter.broker.protocol"),
    _p("security.inter.broker.protocol", "string", "PLAINTEXT", choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
       mode=PER_BROKER, doc="The security protocol brokers use to talk to each other (when inter.broker.listener.name is unset)"),
    _p("ssl.keystore.type", "string", "PEM", choices=("PEM",),
       doc="The key store format. Only PEM is implemented (Kafka's default JKS needs a Java key store)"),
    _p("ssl.keystore.location", "string", None, mode=PER_BROKER,
       doc="A PEM file holding the private key and the certificate chain of the listener"),
    _p("ssl.keystore.password", "string", None, mode=PER_BROKER, sensitive=True,
       doc="Unused with PEM files (Kafka rejects it there): the key is protected by ssl.key.password"),
    _p("ssl.key.password", "string", None, mode=PER_BROKER, sensitive=True,
       doc="The password of an encrypted private key in ssl.keystore.location or ssl.keystore.key"),
    _p("ssl.keystore.certificate.chain", "string", None, mode=PER_BROKER,
       doc="The certificate chain in PEM, inline (instead of ssl.keystore.location)"),
    _p("ssl.keystore.key", "string", None, mode=PER_BROKER, sensitive=True,
       doc="The private key in PEM, inline (instead of ssl.keystore.location)"),
    _p("ssl.truststore.type", "string", "PEM", choices=("PEM",), doc="The trust store format; only PEM is implemented"),
    _p("ssl.truststore.location", "string", None, mode=PER_BROKER,
       doc="A PEM file of the CA certificates client (and peer broker) certificates must chain to"),
    _p("ssl.truststore.password", "string", None, mode=PER_BROKER, sensitive=True, doc="Unused with PEM files"),
    _p("ssl.truststore.certificates", "string", None, mode=PER_BROKER,
       doc="The trusted CA certificates in PEM, inline (instead of ssl.truststore.location)"),
    _p("ssl.client.auth", "string", "none", choices=("required", "requested", "none"), mode=PER_BROKER,
       doc="Whether clients must (required), may (requested) or do not present a certificate; with one, "
           "the principal is its subject mapped by ssl.principal.mapping.rules"),
    _p("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], choices=TLS_PROTOCOLS, mode=PER_BROKER,
       doc="The TLS versions a listener accepts; older clients fail the handshake"),
    _p("ssl.protocol", "string", "TLSv1.3", choices=("TLS", "TLSv1.2", "TLSv1.3"), mode=PER_BROKER,
       doc="The highest TLS version offered (Kafka: the SSLContext protocol)"),
    _p("ssl.cipher.suites", "list", [], mode=PER_BROKER,
       doc="TLS 1.2 cipher suites, OpenSSL or IANA names; empty: the ssl module's secure defaults"),
    _p("ssl.principal.mapping.rules", "string", "DEFAULT", mode=PER_BROKER,
       doc="How a client certificate's distinguished name becomes a principal name: RULE:pattern/replacement/[LU], "
           "... , DEFAULT (the whole DN)"),
    _p("ssl.endpoint.identification.algorithm", "string", "https",
       doc="How a broker checks a peer broker's certificate against its address: https (host name), or empty (off)"),
    _p("gregor.ssl.reload.check.interval.ms", "long", 10000, lo=0,
       doc="How often a TLS listener looks for changed key store and trust store files and reloads them "
           "(connections after a reload use the new certificate); 0: only on a dynamic config change"),
    # --- SASL ---
    _p("sasl.enabled.mechanisms", "list", ["GSSAPI"], mode=PER_BROKER,
       doc="The SASL mechanisms a SASL listener offers (per listener: listener.name.<l>.sasl.enabled.mechanisms). "
           "Implemented: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; Kafka's default GSSAPI is not, so a SASL "
           "listener must enable at least one of those (a startup error otherwise)"),
    _p("sasl.jaas.config", "string", None, mode=PER_BROKER, sensitive=True,
       doc="JAAS login module and options in Kafka's syntax, usually per listener and mechanism "
           "(listener.name.<l>.plain.sasl.jaas.config with user_NAME=\"password\" for PLAIN users, "
           "listener.name.<l>.oauthbearer.sasl.jaas.config for the unsecuredValidator* options)"),
    _p("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", mode=PER_BROKER,
       doc="The SASL mechanism brokers authenticate to each other with on a SASL inter-broker listener"),
    _p("sasl.mechanism.controller.protocol", "string", "GSSAPI",
       doc="KRaft mode: the SASL mechanism nodes authenticate to the controllers with on a SASL controller "
           "listener (PLAIN or SCRAM-SHA-256/512 here)"),
    _p("sasl.server.callback.handler.class", "string", None,
       doc="Per listener and mechanism (listener.name.<l>.oauthbearer.sasl.server.callback.handler.class): "
           "the OAUTHBEARER token check, a Python factory 'package.module:name' called with the JAAS options "
           "and returning validate(token, now_ms); unset: Kafka's unsecured-JWS validator"),
    _p("connections.max.reauth.ms", "long", 0, lo=0,
       doc="KIP-368: the longest a SASL session lasts before the client must re-authenticate on its connection "
           "(answered as session_lifetime_ms; shorter if the credential expires sooner); 0: sessions never expire"),
    _p("connection.failed.authentication.delay.ms", "int", 100, lo=0,
       doc="How long the answer to a failed authentication is held back before the connection is closed, "
           "slowing password guessing"),
    # --- Kafka's PasswordEncoder (gregor.security.password_encoder): dynamic passwords encrypted in the store ---
    _p("password.encoder.secret", "string", None, sensitive=True,
       doc="The secret dynamic password configs (listener.name.<l>.ssl.key.password, ...) are encrypted with in "
           "the metadata store; without it they are refused"),
    _p("password.encoder.old.secret", "string", None, sensitive=True,
       doc="The previous password.encoder.secret: at start, stored passwords are decoded with it and written "
           "back encrypted with the new one"),
    _p("password.encoder.keyfactory.algorithm", "string", None,
       choices=("PBKDF2WithHmacSHA512", "PBKDF2WithHmacSHA256", "PBKDF2WithHmacSHA1"),
       doc="The PBKDF2 variant deriving the key from the secret; unset: PBKDF2WithHmacSHA512 (Kafka's choice)"),
    _p("password.encoder.cipher.algorithm", "string", "AES/CBC/PKCS5Padding",
       choices=("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"), doc="The cipher encrypting dynamic passwords"),
    _p("password.encoder.key.length", "int", 128, lo=8,
       doc="Bits of the key derived from the secret (AES: 128, 192 or 256)"),
    _p("password.encoder.iterations", "int", 4096, lo=1024, doc="PBKDF2 iterations deriving the key"),
    # --- authorizer ---
    _p("authorizer.class.name", "string", "",
       doc="The authorizer: kafka.security.authorizer.AclAuthorizer or "
           "org.apache.kafka.metadata.authorizer.StandardAuthorizer (Kafka's ACL semantics; "
           "gregor.security.authorizer.AclAuthorizer is the same); empty: none, every request is allowed"),
    _p("super.users", "string", None,
       doc="Principals allowed everything, separated by ';' (User:admin;User:broker)"),
    _p("allow.everyone.if.no.acl.found", "bool", False,
       doc="Allow every principal on a resource no ACL mentions (false: only super users)"),
    # --- quotas ---
    _p("quota.window.num", "int", 11, lo=1, doc="Samples the client quotas measure their rates over"),
    _p("quota.window.size.seconds", "int", 1, lo=1, doc="The length of one client quota sample"),
    _p("controller.quota.window.num", "int", 11, lo=1,
       doc="Samples of controller_mutation_rate: its token bucket holds the rate times num x size"),
    _p("controller.quota.window.size.seconds", "int", 1, lo=1, doc="The length of one controller mutation sample"),
    _p("gregor.quota.inactive.sensor.expiration.seconds", "int", 3600, lo=1,
       doc="A client's quota rates are forgotten after this long without a request (Kafka: one hour, fixed)"),
    _p("gregor.quota.sensors.max", "int", 10000, lo=1,
       doc="Quota rates tracked at most (one per quota type and client entity); the least recently used go first"),
]

# Mechanism prefixes Kafka accepts in listener.name.<listener>.<mechanism>.<property>.
SASL_MECHANISM_PREFIXES = ("plain", "scram-sha-256", "scram-sha-512", "oauthbearer", "gssapi")
_LISTENER_PROPS = {"connections.max.reauth.ms", "max.connections", "connection.failed.authentication.delay.ms"}


def listener_overridable(name: str) -> bool:
    """Whether `listener.name.<listener>.<name>` is accepted (Kafka's listener-prefixed configs)."""
    return name.startswith(("ssl.", "sasl.")) or name in _LISTENER_PROPS
