"""The schema registry's properties: one table of `schema.registry.*` names, and the registry's typed view.

The same names serve the standalone process (`gregor schema-registry`, from a properties file and
options) and a broker that runs the registry on its own event loop (`schema.registry.listeners` set in
server.properties), so an operator moving the registry from one to the other keeps the file. The table
lives here, below both: the broker's property table (gregor.config.broker) lists these properties as
broker properties, and the registry (gregor.schema_registry, a higher layer) reads them through
`RegistryConfig`, a Settings view, built from server.properties by the broker and from the registry's own
file by the standalone process. Each property is a `Prop` of gregor.configdef: a wrong type or a value
out of bounds is a ConfigError naming it, when the broker or registry starts, never a surprise under load.

Where Confluent's Schema Registry has a property for the same thing, its meaning and default are kept
(`kafkastore.topic` is `schema.registry.topic`, `schema.compatibility.level` is
`schema.registry.compatibility.level`, `max.schemas.per.subject`, `leader.eligibility`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from gregor.configdef import ConfigError, Prop, PropertySource, Settings, setting

PREFIX = "schema.registry."

COMPATIBILITY_LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                        "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
AUTH_METHODS = ("NONE", "BASIC")
SASL_CHECK_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_PROPS: list[Prop] = [
    Prop("schema.registry.listeners", "list", [],
         doc="Where the REST API listens: comma-separated http://host:port or https://host:port (port 0: any "
             "free port). Empty: no registry."),
    Prop("schema.registry.advertised.url", "string", None,
         doc="The URL other registry instances forward writes to when this one is the primary (default: the "
             "first listener, with the port it bound)."),
    Prop("schema.registry.topic", "string", "_schemas",
         doc="The compacted topic holding every schema, config and mode (Confluent's kafkastore.topic)."),
    Prop("schema.registry.topic.replication.factor", "int", 3, lo=1, hi=32767,
         doc="Replication factor of the topic when the registry creates it, lowered to the number of live "
             "brokers when the cluster has fewer."),
    Prop("schema.registry.group.id", "string", "schema-registry",
         doc="The group through which registry instances sharing the topic elect their primary."),
    Prop("schema.registry.leader.eligibility", "bool", True,
         doc="Whether this instance may become the primary (Confluent's leader.eligibility)."),
    Prop("schema.registry.compatibility.level", "string", "BACKWARD", choices=COMPATIBILITY_LEVELS,
         doc="The compatibility level of subjects with no level of their own, until one is set with PUT /config."),
    Prop("schema.registry.mode.mutability", "bool", True,
         doc="Whether PUT /mode may change the mode (Confluent's mode.mutability)."),
    Prop("schema.registry.kafkastore.timeout.ms", "int", 10_000, lo=1,
         doc="How long a write (produce and read back) or a read that must see the end of the topic may take "
             "before the request fails with 50002."),
    Prop("schema.registry.init.timeout.ms", "int", 60_000, lo=1,
         doc="How long start-up may take to create the topic and read it to its end."),
    Prop("schema.registry.session.timeout.ms", "int", 10_000, lo=1000,
         doc="The group session timeout: a primary that stops heartbeating is replaced after this long."),
    Prop("schema.registry.heartbeat.interval.ms", "int", 3_000, lo=100,
         doc="How often each instance heartbeats to the group coordinator."),
    Prop("schema.registry.request.timeout.ms", "int", 30_000, lo=1,
         doc="Timeout of one request to a broker, and of a write forwarded to the primary."),
    Prop("schema.registry.max.request.bytes", "int", 1 << 20, lo=1024,
         doc="Largest HTTP request body accepted (413 above it)."),
    Prop("schema.registry.max.subjects", "int", 100_000, lo=1,
         doc="Most subjects (with at least one version, deleted or not) the registry holds; registering under a "
             "new subject past it fails with 42205."),
    Prop("schema.registry.max.schemas.per.subject", "int", 1000, lo=1,
         doc="Most versions a subject holds, soft-deleted ones included (Confluent's max.schemas.per.subject); "
             "past it registration fails with 42205."),
    Prop("schema.registry.max.references", "int", 100, lo=0,
         doc="Most schemas one schema may reference, directly and through its references."),
    Prop("schema.registry.schema.cache.size", "int", 1000, lo=1,
         doc="Parsed schemas kept for compatibility checks and format conversion (least recently used first out)."),
    Prop("schema.registry.max.inflight.requests", "int", 256, lo=1,
         doc="Requests served at once; more are refused with 429 (error code 42901) at once."),
    Prop("schema.registry.authentication.method", "string", "NONE", choices=AUTH_METHODS,
         doc="NONE, or BASIC: every request needs HTTP basic credentials (401 without them)."),
    Prop("schema.registry.authentication.realm", "string", "SchemaRegistry",
         doc="The realm named in the WWW-Authenticate header of a 401."),
    Prop("schema.registry.basic.auth.jaas.config", "string", None, sensitive=True,
         doc="Users for BASIC authentication as a PlainLoginModule entry with user_NAME=\"password\" options, "
             "checked as the broker checks SASL/PLAIN users."),
    Prop("schema.registry.basic.auth.sasl.mechanism", "string", None, choices=SASL_CHECK_MECHANISMS,
         doc="Check BASIC credentials by logging in to the cluster with them over SASL with this mechanism, so "
             "the cluster's own SASL users (SCRAM credentials included) are the registry's users."),
    Prop("schema.registry.basic.auth.principal.mapping", "list", [],
         doc="user=Type:name pairs: the Kafka principal a basic-auth user acts as (default User:<user>)."),
    Prop("schema.registry.basic.auth.cache.size", "int", 1000, lo=0,
         doc="Accepted credentials remembered (as salted hashes) so that a client does not cost a login per "
             "request."),
    Prop("schema.registry.basic.auth.cache.ms", "int", 60_000, lo=0,
         doc="How long an accepted credential is remembered."),
    Prop("schema.registry.authorizer.class.name", "string", "",
         doc="An authorizer class name as Kafka's authorizer.class.name accepts: subjects are then guarded by the "
             "cluster's ACLs (see docs/schema-registry.md). Empty: every authenticated user may do everything."),
    Prop("schema.registry.super.users", "string", "",
         doc="Principals allowed everything, separated by ';' (as super.users)."),
    Prop("schema.registry.allow.everyone.if.no.acl.found", "bool", False,
         doc="Whether a subject no ACL mentions is open to everyone."),
    Prop("schema.registry.acl.refresh.ms", "int", 5_000, lo=100,
         doc="How often the standalone registry reads the cluster's ACLs (DescribeAcls)."),
    Prop("schema.registry.ssl.keystore.location", "string", None,
         doc="PEM file with the private key and certificate chain of https listeners."),
    Prop("schema.registry.ssl.key.password", "string", None, sensitive=True,
         doc="Password of an encrypted private key in the key store."),
    Prop("schema.registry.ssl.truststore.location", "string", None,
         doc="PEM file of the CAs trusted for client certificates and for forwarding to an https primary."),
    Prop("schema.registry.ssl.client.auth", "string", "none", choices=("none", "requested", "required"),
         doc="Whether https listeners ask clients for a certificate."),
    Prop("schema.registry.ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"],
         choices=("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"), doc="TLS versions https listeners accept."),
    Prop("schema.registry.ssl.cipher.suites", "list", [], doc="TLS 1.2 cipher suites (empty: OpenSSL's defaults)."),
]
REGISTRY_PROPS: dict[str, Prop] = {p.name: p for p in _PROPS}


@dataclass(frozen=True, slots=True)
class RegistryConfig(Settings):
    """Every registry property, typed; `from_properties` (standalone) or `from_config` (a broker's config)."""

    listeners: list[str] = setting("schema.registry.listeners")
    advertised_url: str | None = setting("schema.registry.advertised.url")
    topic: str = setting("schema.registry.topic")
    topic_replication_factor: int = setting("schema.registry.topic.replication.factor")
    group_id: str = setting("schema.registry.group.id")
    leader_eligibility: bool = setting("schema.registry.leader.eligibility")
    compatibility_level: str = setting("schema.registry.compatibility.level")
    mode_mutability: bool = setting("schema.registry.mode.mutability")
    kafkastore_timeout_ms: int = setting("schema.registry.kafkastore.timeout.ms")
    init_timeout_ms: int = setting("schema.registry.init.timeout.ms")
    session_timeout_ms: int = setting("schema.registry.session.timeout.ms")
    heartbeat_interval_ms: int = setting("schema.registry.heartbeat.interval.ms")
    request_timeout_ms: int = setting("schema.registry.request.timeout.ms")
    max_request_bytes: int = setting("schema.registry.max.request.bytes")
    max_subjects: int = setting("schema.registry.max.subjects")
    max_schemas_per_subject: int = setting("schema.registry.max.schemas.per.subject")
    max_references: int = setting("schema.registry.max.references")
    schema_cache_size: int = setting("schema.registry.schema.cache.size")
    max_inflight_requests: int = setting("schema.registry.max.inflight.requests")
    authentication_method: str = setting("schema.registry.authentication.method")
    authentication_realm: str = setting("schema.registry.authentication.realm")
    basic_auth_jaas_config: str | None = setting("schema.registry.basic.auth.jaas.config")
    basic_auth_sasl_mechanism: str | None = setting("schema.registry.basic.auth.sasl.mechanism")
    basic_auth_principal_mapping: list[str] = setting("schema.registry.basic.auth.principal.mapping")
    basic_auth_cache_size: int = setting("schema.registry.basic.auth.cache.size")
    basic_auth_cache_ms: int = setting("schema.registry.basic.auth.cache.ms")
    authorizer_class_name: str = setting("schema.registry.authorizer.class.name")
    super_users: str = setting("schema.registry.super.users")
    allow_everyone_if_no_acl_found: bool = setting("schema.registry.allow.everyone.if.no.acl.found")
    acl_refresh_ms: int = setting("schema.registry.acl.refresh.ms")
    ssl_keystore_location: str | None = setting("schema.registry.ssl.keystore.location")
    ssl_key_password: str | None = setting("schema.registry.ssl.key.password")
    ssl_truststore_location: str | None = setting("schema.registry.ssl.truststore.location")
    ssl_client_auth: str = setting("schema.registry.ssl.client.auth")
    ssl_enabled_protocols: list[str] = setting("schema.registry.ssl.enabled.protocols")
    ssl_cipher_suites: list[str] = setting("schema.registry.ssl.cipher.suites")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], *, ignore_others: bool = True) -> RegistryConfig:
        """The standalone registry's view: `props` (text or typed values) parsed by the table. Unknown
        `schema.registry.*` names are errors; other names (a broker's own properties, client settings) are
        ignored unless `ignore_others` is False. BASIC authentication needs its users named here."""
        for name in props:
            if name not in REGISTRY_PROPS and (name.startswith(PREFIX) or not ignore_others):
                raise ConfigError(f"Unknown schema registry property {name}")
        values: dict[str, Any] = {}
        for field_name, name in cls.properties().items():
            prop = REGISTRY_PROPS[name]
            raw = props.get(name)
            values[field_name] = prop.default if raw is None else prop.parse(raw)
        config = cls(**values)
        config._check(broker_users=False)
        return config

    @classmethod
    def from_config(cls, config: PropertySource) -> Self:
        """The view of a broker that runs the registry: the values are the broker's, already parsed by the
        same table. BASIC authentication may leave its users unnamed: they are then the broker's own SASL
        users."""
        view = cls(**{f: config.get(p) for f, p in cls.properties().items()})
        view._check(broker_users=True)
        return view

    def _check(self, *, broker_users: bool) -> None:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError("schema.registry.heartbeat.interval.ms must be below schema.registry.session.timeout.ms")
        for listener in self.listeners:
            scheme, sep, rest = listener.partition("://")
            if not sep or scheme.lower() not in ("http", "https") or ":" not in rest:
                raise ConfigError(f"Invalid value {listener} for configuration schema.registry.listeners: "
                                  f"expected http://host:port or https://host:port")
            if scheme.lower() == "https" and not self.ssl_keystore_location:
                raise ConfigError(f"schema.registry.listeners has {listener}: an https listener needs "
                                  f"schema.registry.ssl.keystore.location")
        if (self.authentication_method == "BASIC" and not broker_users
                and not (self.basic_auth_jaas_config or self.basic_auth_sasl_mechanism)):
            raise ConfigError("schema.registry.authentication.method=BASIC needs schema.registry.basic.auth.jaas.config "
                              "or schema.registry.basic.auth.sasl.mechanism (who the users are)")
        for pair in self.basic_auth_principal_mapping:
            user, sep, principal = pair.partition("=")
            if not sep or not user.strip() or ":" not in principal:
                raise ConfigError(f"Invalid value {pair} for configuration schema.registry.basic.auth.principal.mapping: "
                                  f"expected user=Type:name")


assert set(RegistryConfig.properties().values()) == set(REGISTRY_PROPS), "RegistryConfig and the table differ"
