"""The source's `kafka.*` options as settings of gregor.client's Arrow reader, which both the driver (Metadata,
ListOffsets) and the executors (Fetch) use.

Spark's Kafka source hands `kafka.*` to a Java consumer; jobs written for it, and for this source when it
read through librdkafka, carry Java or librdkafka names. So:

- the reader's own settings pass through: librdkafka's names, which are Java's too for everything a
  read needs (client.id, client.rack, isolation.level, security.protocol, ssl.*, sasl.mechanism,
  fetch.max.bytes, max.partition.fetch.bytes, fetch.min.bytes, check.crcs, retry.backoff.ms, ...);
- Java-only names of the same things are translated: request.timeout.ms, sasl.jaas.config (the PLAIN
  and SCRAM login modules' username and password), ssl.truststore.location of ssl.truststore.type
  PEM, and an empty ssl.endpoint.identification.algorithm (Java's way to turn the check off);
- consumer settings that only matter to a consumer group, to offset commits or to a client's own
  internals are accepted and change nothing: the source never joins a group or commits, and Spark's
  checkpoint holds its offsets;
- anything else fails the query, naming the setting.

Unless `kafka.retries` is given, an executor's read keeps retrying what a leader change or a broker
restart explains (Kafka's retriable errors, a broker that cannot be reached) for about
kafkaConsumer.pollTimeoutMs, as Spark's Kafka consumer waits for its polls; the driver's look-ups use
the reader's own retries, each round of them retried fetchOffset.numRetries times.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gregor.spark.options import GregorOptionError

# Java consumer names -> the reader's.
_RENAMED = {"request.timeout.ms": "socket.timeout.ms", "default.api.timeout.ms": "socket.timeout.ms"}

# Settings of a consumer in a group, of commits, or of a client's internals: nothing to do for a reader
# of exact offset ranges.
NO_EFFECT = frozenset({
    "group.id", "group.instance.id", "group.protocol", "group.remote.assignor", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "max.poll.records", "auto.commit.interval.ms",
    "partition.assignment.strategy", "enable.auto.offset.store", "enable.partition.eof", "allow.auto.create.topics",
    "exclude.internal.topics", "fetch.queue.backoff.ms", "queued.min.messages", "fetch.error.backoff.ms",
    "statistics.interval.ms", "metadata.max.age.ms", "topic.metadata.refresh.interval.ms", "reconnect.backoff.ms",
    "reconnect.backoff.max.ms", "connections.max.idle.ms", "receive.buffer.bytes", "send.buffer.bytes",
    "socket.receive.buffer.bytes", "socket.send.buffer.bytes", "socket.keepalive.enable", "api.version.request",
    "broker.address.family", "log.connection.close", "metric.reporters", "metrics.num.samples",
    "metrics.sample.window.ms", "metrics.recording.level", "client.dns.lookup", "ssl.truststore.type",
    "ssl.protocol", "ssl.enabled.protocols",
})

_JAAS_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_credentials(text: str) -> dict[str, str]:
    """username and password of a PLAIN or SCRAM `sasl.jaas.config` line."""
    module = text.strip().split(None, 1)[0] if text.strip() else ""
    if module not in _JAAS_MODULES:
        raise GregorOptionError(f"Kafka option 'kafka.sasl.jaas.config': only {' and '.join(_JAAS_MODULES)} are "
                                f"understood (set kafka.sasl.username and kafka.sasl.password instead), got {module!r}")
    found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(text)}
    if "username" not in found or "password" not in found:
        raise GregorOptionError("Kafka option 'kafka.sasl.jaas.config' names no username=\"...\" password=\"...\"")
    return {"sasl.username": found["username"], "sasl.password": found["password"]}


def reader_settings(params: Mapping[str, str], poll_timeout_ms: int | None = None) -> dict[str, Any]:
    """The reader settings of a source's `kafka.*` params (prefix stripped), checked: a bad name or value
    raises GregorOptionError naming it. With `poll_timeout_ms` (the executors' reads), retries last about
    that long unless kafka.retries says otherwise."""
    from gregor.client.reader_config import ALIASES, BY_NAME, ReaderConfig
    from gregor.configdef import ConfigError

    out: dict[str, Any] = {}
    for name, value in params.items():
        if name in NO_EFFECT:
            continue
        if name == "sasl.jaas.config":
            out.update(_jaas_credentials(value))
            continue
        if name == "ssl.truststore.location":
            if params.get("ssl.truststore.type", "").upper() != "PEM":
                raise GregorOptionError("Kafka option 'kafka.ssl.truststore.location' is read as a PEM file only: set "
                                        "kafka.ssl.truststore.type=PEM, or give the CA file as kafka.ssl.ca.location")
            out["ssl.ca.location"] = value
            continue
        if name == "ssl.endpoint.identification.algorithm" and not value.strip():
            out[name] = "none"
            continue
        target = _RENAMED.get(name, ALIASES.get(name, name))
        if target not in BY_NAME:
            raise GregorOptionError(
                f"Invalid kafka.* consumer setting: {name!r} is not a setting of the gregor source's reader. It takes "
                f"{', '.join(sorted(BY_NAME))} (see gregor.client.reader_config), the Java names request.timeout.ms, "
                "sasl.jaas.config and ssl.truststore.location (PEM), and ignores settings of consumer groups and "
                "commits.")
        out[target] = value
    try:
        cfg = ReaderConfig.parse(out)
    except ConfigError as e:
        raise GregorOptionError(f"Invalid kafka.* consumer setting: {e}") from None
    if poll_timeout_ms is not None and "retries" not in out:
        out["retries"] = max(cfg.retries, math.ceil(poll_timeout_ms / cfg.retry_backoff_max_ms))
    return out
