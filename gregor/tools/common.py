"""What every console tool shares: argument parsing that fails in one line, the bootstrap
option, quiet clients, and a reachability check that names the server it tried.

A console tool is used by a person at a terminal. librdkafka's own log (hundreds of
"Connect to ... failed" lines while nobody listens) and Python tracebacks tell that person
nothing, so the tools silence the client's log and turn every failure into one line on
stderr with a non-zero exit: 2 for a mistake in the command line (as argparse does), 1 for
anything the broker or the network refused.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any, NoReturn

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REQUEST_TIMEOUT_MS = 10_000


class ToolError(Exception):
    """A failure the user can act on: printed as one line, the tool exits with `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class UsageError(ToolError):
    """A mistake in the command line: exit code 2, as argparse uses."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 2)


class EntityNameAction(argparse.Action):
    """--entity-name N and --entity-default, kept in one ordered list (None: the default) so they
    pair with the --entity-type options in the order given, as kafka-configs.sh pairs them
    (`gregor configs` and `gregor quotas`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append(None if option_string == "--entity-default" else values)
        namespace.entity_names = names


class ToolParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the command and pointing to --help,
    instead of the usage block followed by the error, and whose --help shows defaults. Subcommand
    parsers are of the parser's own class, so every `gregor` subcommand gets both."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default in --help, except the empty ones (off switches, no value),
    which would only add "(default: None)" noise."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or "default:" in text or default is argparse.SUPPRESS or default is None
                or default is False or default == [] or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-server, accepted anywhere on the tool's line (each tool has one flat parser)."""
    parser.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,HOST:PORT]",
                        help="broker(s) to connect to")


def add_command_config(parser: argparse.ArgumentParser,
                       help: str = "client properties (security.protocol, ssl.*, sasl.*)") -> None:  # noqa: A002
    """--command-config: the admin client's properties file, read by read_command_config."""
    parser.add_argument("--command-config", metavar="FILE", help=help)


def add_request_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--request-timeout-ms", type=int, default=DEFAULT_REQUEST_TIMEOUT_MS,
                        help="give up on a broker that does not answer within this time")


def bootstrap(args: argparse.Namespace) -> str:
    return str(getattr(args, "bootstrap_server", DEFAULT_BOOTSTRAP))


def timeout_s(args: argparse.Namespace) -> float:
    return max(int(getattr(args, "request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS)), 1) / 1000.0


def parse_key_values(items: list[str], option: str) -> dict[str, str]:
    """KEY=VALUE arguments to a dict; a missing '=' or an empty key is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def delete_config_keys(args: argparse.Namespace) -> list[str]:
    """--delete-config k1,k2 (kafka-configs.sh's form) as its keys; none when the option is absent."""
    return [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]


def client_config(servers: str, **extra: Any) -> dict[str, Any]:
    """librdkafka configuration for a console tool: its own log silenced (the tool reports what
    went wrong itself, once), plus `extra` (librdkafka property names)."""
    conf: dict[str, Any] = {"bootstrap.servers": servers, "log_level": 0, "log.connection.close": False}
    conf.update(extra)
    return conf


def _host_port(server: str) -> tuple[str, int]:
    server = server.strip()
    if "://" in server:  # PLAINTEXT://host:port, as listeners are written
        server = server.split("://", 1)[1]
    if server.startswith("["):  # [IPv6]:port
        host, _, rest = server[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif server.count(":") == 1:
        host, port = server.split(":")
    else:  # a host name alone, or a bare IPv6 address
        host, port = server, ""
    try:
        return host, int(port) if port else 9092
    except ValueError:
        raise UsageError(f"--bootstrap-server: bad port in {server!r}") from None


def check_reachable(servers: str, timeout: float) -> None:
    """Fail in one line when no bootstrap server accepts a TCP connection.

    librdkafka would retry silently (or, with its log on, print a line every few milliseconds)
    until each request times out; a refused connection is known at once, and says more."""
    reasons: list[str] = []
    for server in servers.split(","):
        if not server.strip():
            continue
        host, port = _host_port(server)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except TimeoutError:
            reasons.append(f"{host}:{port}: no answer within {timeout:g} s")
        except OSError as e:
            reasons.append(f"{host}:{port}: {e.strerror or e}")
    if not reasons:
        raise UsageError("--bootstrap-server is empty")
    where = reasons[0] if len(reasons) == 1 else f"any of {servers} ({'; '.join(reasons)})"
    raise ToolError(f"cannot connect to {where}; is a broker running there? (set --bootstrap-server HOST:PORT)")


def admin_client(args: argparse.Namespace) -> Any:
    """An AdminClient on the tool's bootstrap servers, after checking that one is reachable."""
    from confluent_kafka.admin import AdminClient

    servers = bootstrap(args)
    check_reachable(servers, timeout_s(args))
    return AdminClient(client_config(servers, **{"socket.timeout.ms": int(timeout_s(args) * 1000)}))


def _kafka_error(e: Any) -> Any:
    """The KafkaError in a KafkaException (or `e` itself when it is one), else None."""
    if hasattr(e, "str") and hasattr(e, "code"):
        return e
    err = e.args[0] if getattr(e, "args", None) else None
    return err if hasattr(err, "str") and hasattr(err, "code") else None


def kafka_message(e: Any) -> str:
    """The broker's or client's own words for a KafkaException or KafkaError, without the repr around them."""
    err = _kafka_error(e)
    return str(err.str()) if err is not None else str(e)


def error_code(e: Any) -> Any:
    err = _kafka_error(e)
    return err.code() if err is not None else None


def list_topic_names(admin: Any, args: argparse.Namespace) -> list[str]:
    """Every topic's name. A Metadata request for all topics never creates one, unlike a request
    naming a topic, which a broker with auto.create.topics.enable may answer by creating it."""
    from confluent_kafka import KafkaException

    try:
        md = admin.list_topics(timeout=timeout_s(args))
    except KafkaException as e:
        raise no_answer(args, e) from None
    return sorted(md.topics)


def no_answer(args: argparse.Namespace, e: Any) -> ToolError:
    """The error for a request no broker answered in time (the server is named: it may be the wrong one)."""
    return ToolError(f"no answer from the broker at {bootstrap(args)} within {timeout_s(args):g} s "
                     f"({kafka_message(e)})")


def is_no_answer(e: Any) -> bool:
    from confluent_kafka import KafkaError

    return error_code(e) in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def describe_topic(admin: Any, args: argparse.Namespace, name: str) -> Any:
    """The topic's description (partitions, leaders, replicas), or a ToolError saying it does not exist.

    DescribeTopics asks for metadata without allowing auto-creation, so describing a missing topic
    cannot create it."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    try:
        return admin.describe_topics(TopicCollection([name]), request_timeout=timeout_s(args))[name].result()
    except KafkaException as e:
        if error_code(e) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise ToolError(f"Topic '{name}' does not exist.") from None
        if is_no_answer(e):
            raise no_answer(args, e) from None
        raise ToolError(f"describing topic '{name}' failed: {kafka_message(e)}") from None


def run(func: Any, args: argparse.Namespace) -> int:
    """Run a tool command, turning every failure it can explain into one line on stderr."""
    from confluent_kafka import KafkaException

    try:
        return int(func(args) or 0)
    except ToolError as e:
        prefix = f"gregor {args.command}: error" if e.code == 2 else "Error"
        print(f"{prefix}: {e}", file=sys.stderr)
        return e.code
    except KafkaException as e:
        print(f"Error: {no_answer(args, e) if is_no_answer(e) else kafka_message(e)}", file=sys.stderr)
        return 1
    except TimeoutError:  # a client call that the request timeout did not settle
        print(f"Error: no answer from the broker at {bootstrap(args)} within {timeout_s(args):g} s",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`gregor consume t | head -1`): stop quietly, as `cat` does. stdout is
        # pointed at /dev/null so that flushing it at exit does not raise a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, the status a shell reports for a tool killed by it


# --- --command-config: a client properties file written for Kafka's tools -----------------------------

def read_command_config(path: str | None) -> dict[str, str]:
    """The properties of a --command-config file (Java .properties syntax); {} without one."""
    if not path:
        return {}
    from gregor.config import ConfigError, read_properties

    try:
        return read_properties(path)
    except OSError as e:
        raise UsageError(f"cannot read --command-config {path}: {e.strerror or e}") from None
    except ConfigError as e:
        raise UsageError(f"--command-config: {e}") from None


# Kafka (Java client) property -> librdkafka property, where the names differ.
_RENAMED = {
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.keystore.location": "ssl.certificate.location",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
}
# Java-only properties with no librdkafka meaning here (PEM is the only store type librdkafka reads).
_DROPPED = {"ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "ssl.keystore.password",
            "sasl.login.callback.handler.class", "ssl.protocol"}


def client_security_config(props: dict[str, str]) -> dict[str, Any]:
    """librdkafka settings from Kafka client properties (a --command-config file).

    sasl.jaas.config becomes sasl.username / sasl.password (PLAIN, SCRAM) or, for Kafka's unsecured
    OAUTHBEARER login module, sasl.oauthbearer.config with its `unsecuredLoginStringClaim_sub`. A PEM
    keystore file holding key and certificate serves as both ssl.certificate.location and ssl.key.location.
    Raises UsageError for a JAAS text that does not parse."""
    from gregor.security.sasl.jaas import JaasConfigError, parse_single_module

    out: dict[str, Any] = {}
    for key, value in props.items():
        if key in _DROPPED:
            continue
        if key == "sasl.jaas.config":
            try:
                module = parse_single_module(value)
            except JaasConfigError as e:
                raise UsageError(f"--command-config: sasl.jaas.config: {e}") from None
            opts = module.options
            if module.class_name.endswith("OAuthBearerLoginModule"):
                sub = opts.get("unsecuredLoginStringClaim_sub")
                if sub:
                    out["sasl.oauthbearer.config"] = f"principal={sub}"
                    out["enable.sasl.oauthbearer.unsecure.jwt"] = True
            else:
                if "username" in opts:
                    out["sasl.username"] = opts["username"]
                if "password" in opts:
                    out["sasl.password"] = opts["password"]
            continue
        out[_RENAMED.get(key, key)] = value
    if "ssl.certificate.location" in out and "ssl.key.location" not in out and props.get("ssl.keystore.type", "").upper() == "PEM":
        out["ssl.key.location"] = out["ssl.certificate.location"]
    return out
