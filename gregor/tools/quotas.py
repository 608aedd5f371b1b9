"""`gregor quotas`: client quotas, as kafka-configs.sh manages them (--entity-type users|clients).

    gregor quotas --alter --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152' \\
        --entity-type users --entity-name alice --entity-type clients --entity-name app
    gregor quotas --alter --delete-config producer_byte_rate --entity-type clients --entity-default
    gregor quotas --describe [--entity-type users [--entity-name alice | --entity-default]]

It speaks AlterClientQuotas (49) and DescribeClientQuotas (48) itself on Gregor's codec (the
reference client has no client quota API), to the first bootstrap server that answers; every broker
serves both from the shared metadata store. `--command-config` reads a client properties file, as
Kafka's tools take it: security.protocol PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
ssl.truststore.location, ssl.keystore.location, ssl.key.password,
ssl.endpoint.identification.algorithm; sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with
sasl.jaas.config's username and password.
"""

from __future__ import annotations

import argparse
import ssl
from typing import Any

from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.client_quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED
from gregor.security.quotas import CLIENT_ID, QUOTA_TYPES, USER
from gregor.tools.common import (
    EntityNameAction,
    HelpFormatter,
    ToolError,
    UsageError,
    _host_port,
    add_bootstrap,
    add_command_config,
    add_request_timeout,
    bootstrap,
    check_reachable,
    delete_config_keys,
    read_command_config,
    timeout_s,
)
from gregor.tools.controller_client import Connection, error_name

ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID}
LABELS = {USER: "user-principal", CLIENT_ID: "client-id"}
DESCRIBE_VERSION = 1
ALTER_VERSION = 1


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("quotas", help="describe and alter client quotas (like kafka-configs.sh for quotas)",
                       description=__doc__, formatter_class=HelpFormatter)
    add_bootstrap(p)
    add_request_timeout(p)
    add_command_config(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--describe", action="store_true", help="list quotas")
    mode.add_argument("--alter", action="store_true", help="add or delete quota configs")
    p.add_argument("--entity-type", action="append", default=[], choices=sorted(ENTITY_TYPES),
                   help="users or clients; give both for a user's quota for one client-id")
    p.add_argument("--entity-name", action=EntityNameAction, dest="entity_names", metavar="NAME",
                   help="the user or client-id (pairs with the --entity-type before it)")
    p.add_argument("--entity-default", action=EntityNameAction, dest="entity_names", nargs=0,
                   help="the default user or client-id instead of a name")
    p.add_argument("--add-config", metavar="K=V,K=V",
                   help=f"quotas to set: {', '.join(QUOTA_TYPES)}")
    p.add_argument("--delete-config", metavar="K,K", help="quotas to remove")
    p.set_defaults(func=run_quotas, entity_names=None)


def parse_entity(types: list[str], names: list[str | None] | None, need_names: bool) -> list[tuple[str, str | None]]:
    """The (protocol entity type, name or None for the default) pairs of the command line."""
    names = names or []
    if len(set(types)) != len(types):
        raise UsageError("each --entity-type may be given once")
    if len(names) > len(types):
        raise UsageError("--entity-name/--entity-default given without an --entity-type before it")
    if need_names and (not types or len(names) != len(types)):
        raise UsageError("--alter needs --entity-type with --entity-name or --entity-default for each type")
    pairs = [(ENTITY_TYPES[t], names[i] if i < len(names) else "*any*") for i, t in enumerate(types)]
    pairs.sort(key=lambda p: p[0] != USER)  # the user first, as Kafka's entities read
    return pairs


def parse_add_config(text: str) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--add-config expects KEY=VALUE[,KEY=VALUE], got {item!r}")
        if key not in QUOTA_TYPES:
            raise UsageError(f"--add-config: {key} is not a quota config (one of {', '.join(QUOTA_TYPES)})")
        try:
            out.append((key, float(value)))
        except ValueError:
            raise UsageError(f"--add-config: {key}={value.strip()} is not a number") from None
    return out


def _connect(args: argparse.Namespace) -> Connection:
    """A connection to the first bootstrap server that accepts one, secured and authenticated as the
    --command-config says (security.protocol PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)."""
    props = read_command_config(args.command_config)
    servers = bootstrap(args)
    check_reachable(servers, timeout_s(args))
    last: ToolError | None = None
    for server in servers.split(","):
        if not server.strip():
            continue
        try:
            return secured_connection(*_host_port(server), timeout_s(args), props)
        except ToolError as e:
            if isinstance(e, UsageError):
                raise
            last = e
    raise last or ToolError(f"cannot connect to any of {servers}")


def secured_connection(host: str, port: int, timeout: float, props: dict[str, str]) -> Connection:
    """A connection to one broker, with TLS and SASL as the --command-config properties `props` say
    (security.protocol PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL). Also used by `gregor log-dirs`,
    which asks every broker."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise UsageError(f"--command-config: unknown security.protocol {protocol}")
    sasl = _sasl_settings(props) if protocol.startswith("SASL_") else None
    conn = Connection(host, port, timeout)
    try:
        if protocol in ("SSL", "SASL_SSL"):
            _start_tls(conn, host, port, props)
        if sasl is not None:
            _authenticate(conn, *sasl)
    except BaseException:
        conn.close()
        raise
    return conn


def _start_tls(conn: Connection, host: str, port: int, props: dict[str, str]) -> None:
    ctx = ssl.create_default_context(cafile=props.get("ssl.truststore.location"))
    if props.get("ssl.endpoint.identification.algorithm", "https") == "":
        ctx.check_hostname = False
    if props.get("ssl.keystore.location"):
        ctx.load_cert_chain(props["ssl.keystore.location"], password=props.get("ssl.key.password"))
    try:
        conn.sock = ctx.wrap_socket(conn.sock, server_hostname=host)
    except (ssl.SSLError, OSError) as e:
        raise ToolError(f"TLS handshake with {host}:{port} failed: {e}") from None


def _sasl_settings(props: dict[str, str]) -> tuple[str, str, str]:
    """(mechanism, username, password) from sasl.mechanism and sasl.jaas.config (PLAIN, SCRAM)."""
    from gregor.security.sasl.jaas import JaasConfigError, parse_single_module

    mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise UsageError(f"--command-config: sasl.mechanism {mechanism} is not supported by gregor quotas "
                         "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    try:
        options = parse_single_module(props.get("sasl.jaas.config", "")).options
    except JaasConfigError as e:
        raise UsageError(f"--command-config: sasl.jaas.config: {e}") from None
    if "username" not in options or "password" not in options:
        raise UsageError("--command-config: sasl.jaas.config needs username and password")
    return mechanism, options["username"], options["password"]


def _authenticate(conn: Connection, mechanism: str, username: str, password: str) -> None:
    """SaslHandshake v1 then SaslAuthenticate v2 rounds (KIP-152), as Kafka's clients do."""
    from gregor.security.sasl.client import SaslClientError, sasl_client

    resp = conn.request(apis.BY_KEY[17], 1, {"mechanism": mechanism})
    if resp.error_code != ErrorCode.NONE:
        raise ToolError(f"the broker does not enable SASL mechanism {mechanism} on this listener "
                        f"(it enables {', '.join(resp.mechanisms) or 'none'})")
    client = sasl_client(mechanism, username, password)
    token: bytes | None = client.first_message()
    try:
        while token is not None:
            r = conn.request(apis.BY_KEY[36], 2, {"auth_bytes": token})
            if r.error_code != ErrorCode.NONE:
                raise ToolError(f"authentication failed: {error_name(r.error_code)}: {r.error_message}")
            token = client.evaluate(bytes(r.auth_bytes or b""))
    except SaslClientError as e:
        raise ToolError(f"authentication failed: {e}") from None


def describe_body(pairs: list[tuple[str, str | None]]) -> dict[str, Any]:
    components = []
    for entity_type, name in pairs:
        if name == "*any*":
            components.append({"entity_type": entity_type, "match_type": MATCH_SPECIFIED, "match": None})
        elif name is None:
            components.append({"entity_type": entity_type, "match_type": MATCH_DEFAULT, "match": None})
        else:
            components.append({"entity_type": entity_type, "match_type": MATCH_EXACT, "match": name})
    return {"components": components, "strict": bool(pairs)}


def describe_entity(entity: list[Any]) -> str:
    """kafka-configs.sh's words: user-principal 'alice', client-id 'app', the default client-id."""
    parts = []
    for e in sorted(entity, key=lambda e: e.entity_type != USER):
        label = LABELS.get(e.entity_type, e.entity_type)
        parts.append(f"the default {label}" if e.entity_name is None else f"{label} '{e.entity_name}'")
    return ", ".join(parts)


def _value(v: float) -> str:
    return repr(float(v))


def run_quotas(args: argparse.Namespace) -> int:
    pairs = parse_entity(args.entity_type, args.entity_names, need_names=args.alter)
    if args.describe:
        if args.add_config or args.delete_config:
            raise UsageError("--add-config and --delete-config go with --alter")
        conn = _connect(args)
        try:
            resp = conn.request(apis.BY_KEY[48], DESCRIBE_VERSION, describe_body(pairs))
        finally:
            conn.close()
        if resp.error_code != ErrorCode.NONE:
            raise ToolError(f"DescribeClientQuotas failed: {error_name(resp.error_code)}: {resp.error_message}")
        for entry in resp.entries or []:
            values = ", ".join(f"{v.key}={_value(v.value)}" for v in sorted(entry.values, key=lambda v: v.key))
            print(f"Quota configs for {describe_entity(entry.entity)} are {values}")
        return 0
    adds = parse_add_config(args.add_config or "")
    deletes = delete_config_keys(args)
    if not adds and not deletes:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    for k in deletes:
        if k not in QUOTA_TYPES:
            raise UsageError(f"--delete-config: {k} is not a quota config (one of {', '.join(QUOTA_TYPES)})")
    if set(deletes) & {k for k, _ in adds}:
        raise UsageError("a config cannot be both added and deleted")
    ops = [{"key": k, "value": v, "remove": False} for k, v in adds]
    ops += [{"key": k, "value": 0.0, "remove": True} for k in deletes]
    entity = [{"entity_type": t, "entity_name": n} for t, n in pairs]
    conn = _connect(args)
    try:
        resp = conn.request(apis.BY_KEY[49], ALTER_VERSION,
                            {"entries": [{"entity": entity, "ops": ops}], "validate_only": False})
    finally:
        conn.close()
    (result,) = resp.entries
    if result.error_code != ErrorCode.NONE:
        raise ToolError(f"AlterClientQuotas failed: {error_name(result.error_code)}: {result.error_message}")
    print(f"Completed updating config for {describe_entity(result.entity)}.")
    return 0
