"""The Arrow reader's settings: librdkafka's names where librdkafka has the setting, `arrow.*` for the shape of
what the reader returns, each parsed and bounded by one `Prop` (gregor.configdef), so a bad value fails
at once with a message naming the setting.

Defaults are librdkafka's, except where a bulk reader wants otherwise, as said in each doc:
max.partition.fetch.bytes is 16 MiB (librdkafka: 1 MiB), because one partition read at full speed
needs large fetches (each fetch is one round trip the broker serves in one go), and isolation.level is
read_uncommitted, as in Kafka's Java client and Spark's Kafka source.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gregor.configdef import INT_MAX, ConfigError, Prop

SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

_MIB = 1 << 20

PROPS: tuple[Prop, ...] = (
    Prop("bootstrap.servers", "string", "", doc="host:port of one or more brokers, comma-separated"),
    Prop("client.id", "string", "gregor-arrow-reader", doc="The client id sent with each request"),
    Prop("client.rack", "string", "",
         doc="This client's rack: with it, the leader may name a replica in the same rack to read from (KIP-392)"),
    Prop("security.protocol", "string", "plaintext", choices=SECURITY_PROTOCOLS,
         doc="How to talk to brokers: plaintext, ssl, sasl_plaintext or sasl_ssl"),
    Prop("ssl.ca.location", "string", "", doc="PEM file of the CAs that sign the brokers' certificates "
                                               "(default: the system's trust store)"),
    Prop("ssl.certificate.location", "string", "", doc="PEM file of this client's certificate (for ssl.client.auth)"),
    Prop("ssl.key.location", "string", "", doc="PEM file of this client's private key"),
    Prop("ssl.key.password", "string", "", sensitive=True, doc="Password of ssl.key.location, if it is encrypted"),
    Prop("ssl.endpoint.identification.algorithm", "string", "https", choices=("none", "https"),
         doc="https: check that the broker's certificate names the host connected to"),
    Prop("sasl.mechanism", "string", "PLAIN", choices=SASL_MECHANISMS,
         doc="SASL mechanism with sasl_plaintext and sasl_ssl (librdkafka also spells it sasl.mechanisms)"),
    Prop("sasl.username", "string", "", doc="SASL user name"),
    Prop("sasl.password", "string", "", sensitive=True, doc="SASL password"),
    Prop("isolation.level", "string", "read_uncommitted", choices=ISOLATION_LEVELS,
         doc="read_committed reads up to the last stable offset and drops aborted transactions"),
    Prop("fetch.max.bytes", "int", 52428800, lo=1024, hi=INT_MAX - 512,
         doc="Most bytes one Fetch response may hold (a first batch larger than this still comes whole)"),
    Prop("max.partition.fetch.bytes", "int", 16 * _MIB, lo=1024, hi=INT_MAX - 512,
         doc="Most bytes one Fetch returns per partition (librdkafka's default is 1 MiB; a bulk reader "
             "goes faster with larger fetches)"),
    Prop("fetch.min.bytes", "int", 1, lo=1, hi=INT_MAX, doc="Bytes a broker waits for before answering a Fetch"),
    Prop("fetch.wait.max.ms", "int", 500, lo=0, hi=300_000,
         doc="Longest a broker waits for fetch.min.bytes (Kafka's Java client: fetch.max.wait.ms)"),
    Prop("check.crcs", "bool", True, doc="Check the CRC32C of every record batch read"),
    Prop("receive.message.max.bytes", "int", 100_000_000, lo=1000, hi=INT_MAX,
         doc="Largest response accepted from a broker; at least fetch.max.bytes + 512"),
    Prop("queued.max.messages.kbytes", "int", 65536, lo=1, hi=2_097_151,
         doc="Most KiB of fetch responses held at once, received or in flight, before they are decoded: "
             "the next fetch is sent before a response is decoded only while this leaves room for it"),
    Prop("socket.timeout.ms", "int", 60_000, lo=10, hi=300_000, doc="Longest wait for a broker's answer"),
    Prop("socket.connection.setup.timeout.ms", "int", 30_000, lo=1000, hi=INT_MAX,
         doc="Longest a connection (TCP, TLS, SASL) may take to set up"),
    Prop("retries", "int", 10, lo=0, hi=INT_MAX,
         doc="How often a retriable failure (leader moved, broker unreachable, no leader yet, storage error) "
             "is retried, per partition and in a row, before the read fails"),
    Prop("retry.backoff.ms", "int", 100, lo=1, hi=300_000, doc="First wait before a retry (doubling each time)"),
    Prop("retry.backoff.max.ms", "int", 1000, lo=1, hi=300_000, doc="Longest wait before a retry"),
    Prop("fetch.partition.ranges", "int", 1, lo=1, hi=64,
         doc="Read each partition's range as this many consecutive sub-ranges fetched in parallel, each on a "
             "connection of its own, so a broker with cores to spare always has the partition's next fetch "
             "queued while it serves one (sub-ranges of at least 100,000 offsets). read_all() puts the rows "
             "back in offset order; iterated, a partition's batches then come from its sub-ranges in turn"),
    Prop("batch.decompressed.max.bytes", "int", 128 * _MIB, lo=1024, hi=INT_MAX,
         doc="Largest a compressed record batch may expand to (a decompression bomb fails the read instead)"),
    Prop("arrow.batch.max.records", "int", 65536, lo=1, hi=INT_MAX,
         doc="Most rows in one Arrow RecordBatch yielded"),
    Prop("arrow.batch.max.bytes", "int", 16 * _MIB, lo=1024, hi=1 << 30,
         doc="Key, value and header bytes after which a RecordBatch is yielded (checked between Kafka batches, "
             "so one may exceed it by one Kafka batch)"),
    Prop("arrow.timestamp.unit", "string", "ms", choices=("ms", "us"), doc="Unit of the timestamp column"),
    Prop("arrow.timestamp.timezone", "string", "UTC",
         doc="Time zone of the timestamp column ('' for none: naive timestamps)"),
)
BY_NAME = {p.name: p for p in PROPS}
ALIASES = {"sasl.mechanisms": "sasl.mechanism", "fetch.max.wait.ms": "fetch.wait.max.ms",
           "metadata.broker.list": "bootstrap.servers"}


@dataclass(frozen=True)
class ReaderConfig:
    bootstrap_servers: str
    client_id: str
    client_rack: str
    security_protocol: str
    ssl_ca_location: str
    ssl_certificate_location: str
    ssl_key_location: str
    ssl_key_password: str
    ssl_endpoint_identification_algorithm: str
    sasl_mechanism: str
    sasl_username: str
    sasl_password: str
    isolation_level: str
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    fetch_min_bytes: int
    fetch_wait_max_ms: int
    check_crcs: bool
    receive_message_max_bytes: int
    queued_max_messages_kbytes: int
    fetch_partition_ranges: int
    socket_timeout_ms: int
    socket_connection_setup_timeout_ms: int
    retries: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    batch_decompressed_max_bytes: int
    arrow_batch_max_records: int
    arrow_batch_max_bytes: int
    arrow_timestamp_unit: str
    arrow_timestamp_timezone: str

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> ReaderConfig:
        """Settings by name (librdkafka's dotted names; underscores stand for dots, so keyword
        arguments work too). Raises ConfigError naming the setting."""
        values: dict[str, Any] = {}
        for raw_name, raw in settings.items():
            name = raw_name.replace("_", ".")
            name = ALIASES.get(name, name)
            prop = BY_NAME.get(name)
            if prop is None:
                raise ConfigError(f"Unknown configuration {raw_name!r} for the Arrow reader: it takes "
                                  f"{', '.join(sorted(BY_NAME))}")
            if name in values:
                raise ConfigError(f"Configuration {name} is given twice")
            if name == "security.protocol" and isinstance(raw, str):
                raw = raw.lower()
            if name == "sasl.mechanism" and isinstance(raw, str):
                raw = raw.upper()
            values[name] = prop.parse(raw)
        for p in PROPS:
            values.setdefault(p.name, p.default)
        cfg = cls(**{n.replace(".", "_"): v for n, v in values.items()})
        cfg._check()
        return cfg

    def _check(self) -> None:
        if self.receive_message_max_bytes < self.fetch_max_bytes + 512:
            raise ConfigError(f"receive.message.max.bytes ({self.receive_message_max_bytes}) must be at least "
                              f"fetch.max.bytes + 512 ({self.fetch_max_bytes + 512})")
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError(f"retry.backoff.max.ms ({self.retry_backoff_max_ms}) must be at least "
                              f"retry.backoff.ms ({self.retry_backoff_ms})")
        if self.sasl and not self.sasl_username:
            raise ConfigError(f"security.protocol {self.security_protocol} needs sasl.username and sasl.password")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise ConfigError("ssl.certificate.location and ssl.key.location go together")
        tz = self.arrow_timestamp_timezone
        if tz and not re.fullmatch(r"[+-]\d\d:\d\d", tz):
            try:
                zoneinfo.ZoneInfo(tz)
            except (ValueError, zoneinfo.ZoneInfoNotFoundError):
                raise ConfigError(f"arrow.timestamp.timezone: {tz!r} is not a time zone (e.g. UTC, Europe/Paris, "
                                  f"+02:00, or '' for none)") from None

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("ssl", "sasl_ssl")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("sasl_")

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"

    @property
    def queued_max_bytes(self) -> int:
        return self.queued_max_messages_kbytes * 1024

    def bootstrap(self) -> list[tuple[str, int]]:
        """(host, port) of each bootstrap server; ConfigError if there is none or one is malformed."""
        out = []
        for item in self.bootstrap_servers.split(","):
            item = item.strip()
            if not item:
                continue
            if "://" in item:
                item = item.split("://", 1)[1]
            host, sep, port = item.rpartition(":")
            if not sep or not port.isdigit() or not host:
                raise ConfigError(f"bootstrap.servers: {item!r} is not host:port")
            out.append((host.strip("[]"), int(port)))
        if not out:
            raise ConfigError("bootstrap.servers is empty: name at least one broker as host:port")
        return out
