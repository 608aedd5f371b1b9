"""Kafka broker configs Gregor knows but does not apply: accepted, stored, described, no effect.

Operators and tools carry Kafka's broker configs over: a server.properties written for Kafka, Strimzi-
or Ansible-generated files, librdkafka's admin test (which alters `sasl.kerberos.min.time.before.relogin`
and `background.threads` on a broker), kafka-configs.sh scripts. Refusing those names as unknown breaks
them for no benefit, so each one here is declared with Kafka's type, default, bounds and update mode:
it is accepted in server.properties and, where Kafka's update mode is dynamic, by AlterConfigs and
IncrementalAlterConfigs (validated as Kafka validates it, stored in the metadata store, returned by
DescribeConfigs with its source), and its documentation says "Accepted, no effect in Gregor".

Only configs whose absence of effect is harmless belong here: JVM-specific knobs (key-manager
algorithms), thread pools of Kafka's architecture that an asyncio broker does not have (Gregor's
own equivalents, where it has one, are real configs with a real effect), and Kerberos settings
(GSSAPI is not among the mechanisms sasl.enabled.mechanisms accepts, so they can never matter). A config
whose silent acceptance would weaken security or lose data (zookeeper.set.acl, ssl.allow.dn.changes,
...) is not here: it stays unknown and is refused.
"""

from __future__ import annotations

from typing import Any

from gregor.configdef import CLUSTER_WIDE, PER_BROKER, Prop

NO_EFFECT_DOC = "Accepted, no effect in Gregor"
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1


def _k(name: str, type_: str, default: Any, mode: str, kafka_doc: str, lo: float | None = None,
       hi: float | None = None) -> Prop:
    return Prop(name, type_, default, lo, hi, None, f"{NO_EFFECT_DOC} (in Kafka: {kafka_doc})", mode)


KNOWN_PROPS: list[Prop] = [
    # Kafka's thread pools (cluster-wide dynamic in Kafka). Gregor runs one asyncio loop per broker:
    # requests are read, handled and answered on it, so there are no network or IO threads to size.
    _k("background.threads", "int", 10, CLUSTER_WIDE, "threads of various background processing tasks", lo=1),
    _k("num.io.threads", "int", 8, CLUSTER_WIDE, "threads that process requests, including disk I/O", lo=1),
    _k("num.network.threads", "int", 3, CLUSTER_WIDE,
       "threads that receive requests from the network and send responses", lo=1),
    _k("num.recovery.threads.per.data.dir", "int", 2, CLUSTER_WIDE,
       "threads per data directory that recover logs at startup and flush them at shutdown", lo=1),
    # Kerberos (SASL/GSSAPI), per-broker dynamic in Kafka.
    _k("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", PER_BROKER, "the Kerberos kinit command path"),
    _k("sasl.kerberos.min.time.before.relogin", "long", 60000, PER_BROKER,
       "login thread sleep time between refresh attempts, in ms"),
    _k("sasl.kerberos.principal.to.local.rules", "list", ["DEFAULT"], PER_BROKER,
       "rules mapping Kerberos principal names to short names"),
    _k("sasl.kerberos.service.name", "string", None, PER_BROKER, "the Kerberos principal name Kafka runs as"),
    _k("sasl.kerberos.ticket.renew.jitter", "double", 0.05, PER_BROKER,
       "random jitter added to the renewal time of a Kerberos ticket"),
    _k("sasl.kerberos.ticket.renew.window.factor", "double", 0.8, PER_BROKER,
       "share of a Kerberos ticket's lifetime after which the login thread renews it"),
    # The SASL client login refresh of inter-broker OAUTHBEARER (per-broker dynamic in Kafka); Gregor's
    # brokers authenticate to each other with PLAIN or SCRAM, which never refresh a token.
    _k("sasl.login.refresh.buffer.seconds", "int", 300, PER_BROKER,
       "seconds before a credential expires that a refresh should start", lo=0, hi=3600),
    _k("sasl.login.refresh.min.period.seconds", "int", 60, PER_BROKER,
       "least seconds between two credential refreshes", lo=0, hi=900),
    _k("sasl.login.refresh.window.factor", "double", 0.8, PER_BROKER,
       "share of a credential's lifetime after which it is refreshed", lo=0.5, hi=1.0),
    _k("sasl.login.refresh.window.jitter", "double", 0.05, PER_BROKER,
       "random jitter added to the credential refresh time", lo=0.0, hi=0.25),
    # Java's TLS provider knobs (per-broker dynamic in Kafka); Gregor's TLS is OpenSSL through Python's ssl.
    _k("ssl.keymanager.algorithm", "string", "SunX509", PER_BROKER, "the Java key manager factory algorithm"),
    _k("ssl.trustmanager.algorithm", "string", "PKIX", PER_BROKER, "the Java trust manager factory algorithm"),
    _k("ssl.secure.random.implementation", "string", None, PER_BROKER, "the Java SecureRandom implementation"),
    _k("ssl.provider", "string", None, PER_BROKER, "the Java security provider of TLS connections"),
]

NO_EFFECT: frozenset[str] = frozenset(p.name for p in KNOWN_PROPS)
