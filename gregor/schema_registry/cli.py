"""`gregor schema-registry`: a standalone schema registry in front of any Gregor (or Kafka) cluster.

    gregor schema-registry [registry.properties] --bootstrap-server HOST:PORT
        [--listeners http://127.0.0.1:8081] [--command-config FILE] [--override KEY=VALUE]...

The properties file and --override hold `schema.registry.*` properties (docs/schema-registry.md);
--listeners sets schema.registry.listeners. --command-config holds the client properties the registry
connects to the cluster with, as for the other tools: security.protocol, ssl.truststore.location,
ssl.keystore.location, ssl.key.password, ssl.endpoint.identification.algorithm, sasl.mechanism and
sasl.jaas.config (PLAIN or SCRAM username and password).

Runs until SIGTERM or SIGINT, then leaves the group (so another instance takes over at once) and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any

from gregor.configdef import ConfigError

if TYPE_CHECKING:
    from gregor.security.inter_broker import ClientSecurity

DEFAULT_LISTENER = "http://127.0.0.1:8081"
CLIENT_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("schema-registry", help="run a schema registry (Confluent's REST API) for a cluster",
                       description=__doc__)
    p.add_argument("properties", nargs="?", help="a properties file of schema.registry.* properties")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT[,HOST:PORT]",
                   help="broker(s) to connect to")
    p.add_argument("--listeners", default=None, metavar="URL[,URL]",
                   help=f"where the REST API listens (schema.registry.listeners; default {DEFAULT_LISTENER})")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties for the connection to the cluster (security.protocol, ssl.*, sasl.*)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a schema.registry.* property (repeatable)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="lowest level of log lines printed to stderr")
    p.set_defaults(func=run_command)


def client_security(props: dict[str, str]) -> ClientSecurity | None:
    """The ClientSecurity for --command-config properties, None for PLAINTEXT. Raises ConfigError."""
    from gregor.schema_registry.auth import SASL_AUTHENTICATE, SASL_HANDSHAKE
    from gregor.security.inter_broker import ClientSecurity, RawRequest
    from gregor.security.sasl.client import SaslClientError, sasl_client
    from gregor.security.sasl.jaas import JaasConfigError, parse_single_module
    from gregor.security.tls import TlsSettings, build_client_context

    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in CLIENT_PROTOCOLS:
        raise ConfigError(f"security.protocol {protocol} is not one of {', '.join(CLIENT_PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        return None
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = build_client_context(TlsSettings(
            props.get("ssl.keystore.location"), props.get("ssl.key.password"), None, None,
            props.get("ssl.truststore.location"), None, "none", ("TLSv1.2", "TLSv1.3"), (), "DEFAULT",
            props.get("ssl.endpoint.identification.algorithm", "https")), "--command-config")
    auth = None
    if protocol.startswith("SASL"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        try:
            options = parse_single_module(props.get("sasl.jaas.config", "")).options
        except JaasConfigError as e:
            raise ConfigError(f"sasl.jaas.config: {e}") from None
        user, password = options.get("username"), options.get("password")
        if not user or password is None:
            raise ConfigError("sasl.jaas.config needs username and password options")
        sasl_client(mechanism, user, password)  # an unsupported mechanism fails here, at start

        async def authenticate(request: RawRequest) -> None:
            resp = await request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
            if resp.error_code:
                raise SaslClientError(f"the cluster does not enable SASL {mechanism}")
            client = sasl_client(mechanism, user, password)
            token: bytes | None = client.first_message()
            while token is not None:
                r = await request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
                if r.error_code:
                    raise SaslClientError(str(r.error_message))
                token = client.evaluate(bytes(r.auth_bytes or b""))

        auth = authenticate
    return ClientSecurity("client", protocol, ctx, auth)


async def serve(props: dict[str, str], bootstrap: str, client_props: dict[str, str]) -> int:
    from gregor.config.schema_registry import RegistryConfig
    from gregor.schema_registry.errors import RegistryError
    from gregor.schema_registry.kafka import KafkaClient, KafkaRequestError
    from gregor.schema_registry.server import SchemaRegistry

    config = RegistryConfig.from_properties(props)
    kafka = KafkaClient(bootstrap, client_id="schema-registry", security=client_security(client_props),
                        request_timeout_s=config.request_timeout_ms / 1000)
    registry = SchemaRegistry(config, kafka)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await registry.start()
    except (RegistryError, KafkaRequestError, ConfigError, OSError) as e:
        kind = "configuration error" if isinstance(e, ConfigError) else "cannot start"
        print(f"gregor schema-registry: {kind}: {e}", file=sys.stderr)
        await registry.stop()
        await kafka.close()
        return 2 if isinstance(e, ConfigError) else 1
    print(f"Schema registry listening on {', '.join(registry.urls)}", file=sys.stderr, flush=True)
    await stopping.wait()
    await registry.stop()
    await kafka.close()
    return 0


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        print("gregor schema-registry: needs the registry extra: pip install 'gregor[registry]'", file=sys.stderr)
        return 2
    from gregor.config import read_properties

    try:
        props = read_properties(args.properties) if args.properties else {}
        client_props = read_properties(args.command_config) if args.command_config else {}
        for item in args.override:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--override expects KEY=VALUE, got {item!r}")
            props[key.strip()] = value.strip()
        if args.listeners is not None:
            props["schema.registry.listeners"] = args.listeners
        props.setdefault("schema.registry.listeners", DEFAULT_LISTENER)
        from gregor.config.schema_registry import RegistryConfig

        RegistryConfig.from_properties(props)  # every property checked before anything starts
        client_security(client_props)
    except (ConfigError, OSError) as e:
        print(f"gregor schema-registry: configuration error: {e}", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(serve(props, args.bootstrap_server, client_props))
    except ConfigError as e:
        print(f"gregor schema-registry: configuration error: {e}", file=sys.stderr)
        return 2
