"""`gregor users`: SCRAM credentials, as kafka-configs.sh --entity-type users manages them.

    gregor users --bootstrap-server H:P --alter --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    gregor users --alter --entity-name alice --delete-config SCRAM-SHA-512
    gregor users --describe [--entity-name alice]

It speaks AlterUserScramCredentials / DescribeUserScramCredentials through confluent-kafka's
AdminClient, which salts and hashes the password on the client side: the password itself never
crosses the network. `--command-config FILE` takes the client's security settings in Kafka's
property names (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location...),
translated for librdkafka by `gregor.tools.common.client_security_config`, so the file written for Kafka's
tools works.
"""

from __future__ import annotations

import argparse
from typing import Any

from gregor.security.sasl.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS
from gregor.tools.common import (
    HelpFormatter,
    ToolError,
    UsageError,
    add_bootstrap,
    add_command_config,
    add_request_timeout,
    bootstrap,
    check_reachable,
    client_config,
    client_security_config,
    delete_config_keys,
    error_code,
    is_no_answer,
    kafka_message,
    no_answer,
    read_command_config,
    timeout_s,
)

SCRAM_NAMES = ("SCRAM-SHA-256", "SCRAM-SHA-512")

def _split_top_level(text: str) -> list[str]:
    """'A=[x=1,y=2],B=[z=3]' -> ['A=[x=1,y=2]', 'B=[z=3]']: commas inside brackets stay."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise UsageError(f"--add-config: unbalanced brackets in {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_add_config(text: str) -> dict[str, tuple[str, int]]:
    """kafka-configs.sh's SCRAM syntax -> {mechanism: (password, iterations)}."""
    out: dict[str, tuple[str, int]] = {}
    for item in _split_top_level(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise UsageError(f"--add-config expects KEY=VALUE, got {item!r}")
        if key not in SCRAM_NAMES:
            raise UsageError(f"--add-config: {key!r} is not a SCRAM mechanism ({', '.join(SCRAM_NAMES)}); "
                             f"user quotas are set with 'gregor quotas'")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            fields: dict[str, str] = {}
            for kv in value[1:-1].split(","):
                k, s, v = kv.partition("=")
                if not s:
                    raise UsageError(f"--add-config {key}: expected name=value, got {kv!r}")
                fields[k.strip()] = v.strip()
        else:
            fields = {"password": value}
        unknown = set(fields) - {"password", "iterations"}
        if unknown:
            raise UsageError(f"--add-config {key}: unknown field(s) {', '.join(sorted(unknown))} "
                             f"(password, iterations)")
        if not fields.get("password"):
            raise UsageError(f"--add-config {key}: a password is required ({key}=[password=...])")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise UsageError(f"--add-config {key}: iterations must be a number") from None
        out[key] = (fields["password"], iterations)
    return out


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    extra: dict[str, Any] = {"socket.timeout.ms": int(timeout_s(args) * 1000)}
    if args.command_config:
        extra.update(client_security_config(read_command_config(args.command_config)))
    servers = bootstrap(args)
    check_reachable(servers, timeout_s(args))

    def on_error(err: Any) -> None:
        # librdkafka reports a refused login here only; the request itself just times out.
        if err.code() == KafkaError._AUTHENTICATION:
            args.auth_error = err.str()

    try:
        args.admin = AdminClient(client_config(servers, error_cb=on_error, **extra))
    except Exception as e:  # librdkafka refuses an unknown or invalid property
        raise UsageError(f"--command-config: {kafka_message(e)}") from None
    return args.admin


def _failure(args: argparse.Namespace, user: str, e: Exception) -> ToolError:
    admin = getattr(args, "admin", None)
    if admin is not None:
        admin.poll(0.1)  # serves the error callback
    auth_error = getattr(args, "auth_error", None)
    if auth_error:
        return ToolError(f"the broker at {bootstrap(args)} refused the login: {auth_error}")
    if is_no_answer(e):
        return no_answer(args, e)
    return ToolError(f"user {user}: {kafka_message(e)}")


def cmd_describe(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, KafkaException

    admin = _admin(args)
    if args.entity_name:
        futures = admin.describe_user_scram_credentials([args.entity_name], request_timeout=timeout_s(args))
        descriptions = {}
        for user, fut in futures.items():
            try:
                descriptions[user] = fut.result()
            except KafkaException as e:
                if error_code(e) == KafkaError.RESOURCE_NOT_FOUND:
                    print(f"No SCRAM credentials for user-principal '{user}'.")
                    return 0
                raise _failure(args, user, e) from None
    else:
        try:
            descriptions = admin.describe_user_scram_credentials(request_timeout=timeout_s(args)).result()
        except KafkaException as e:
            raise _failure(args, "(all)", e) from None
    for user in sorted(descriptions):
        infos = ", ".join(f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
                          for i in descriptions[user].scram_credential_infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {infos}")
    return 0


def cmd_alter(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    if not args.entity_name:
        raise UsageError("--alter needs --entity-name USER")
    upserts = parse_add_config(args.add_config) if args.add_config else {}
    deletes = delete_config_keys(args)
    if not upserts and not deletes:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    for name in deletes:
        if name not in SCRAM_NAMES:
            raise UsageError(f"--delete-config: {name!r} is not a SCRAM mechanism ({', '.join(SCRAM_NAMES)})")
    for name, (_, iterations) in upserts.items():
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise UsageError(f"--add-config {name}: iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    alterations: list[Any] = []
    for name, (password, iterations) in upserts.items():
        mech = ScramMechanism[name.replace("-", "_")]
        alterations.append(UserScramCredentialUpsertion(args.entity_name, ScramCredentialInfo(mech, iterations),
                                                        password.encode("utf-8")))
    for name in deletes:
        alterations.append(UserScramCredentialDeletion(args.entity_name, ScramMechanism[name.replace("-", "_")]))
    admin = _admin(args)
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=timeout_s(args))
    for user, fut in futures.items():
        try:
            fut.result()
        except KafkaException as e:
            raise _failure(args, user, e) from None
    print(f"Completed updating config for user {args.entity_name}.")
    return 0


def cmd_users(args: argparse.Namespace) -> int:
    if args.alter == args.describe:
        raise UsageError("give exactly one of --alter and --describe")
    return cmd_alter(args) if args.alter else cmd_describe(args)


def add_subcommands(sub: Any) -> None:
    u = sub.add_parser(
        "users", formatter_class=HelpFormatter,
        help="add, delete and describe users' SCRAM credentials",
        description="Add, delete and describe users' SCRAM credentials (kafka-configs.sh --entity-type users).",
        epilog="examples:\n"
               "  gregor users --alter --entity-name alice \\\n"
               "      --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
               "SCRAM-SHA-512=[password=alice-secret]'\n"
               "  gregor users --alter --entity-name alice --delete-config SCRAM-SHA-512\n"
               "  gregor users --describe --entity-name alice\n"
               "  gregor users --describe --command-config admin.properties")
    u.add_argument("--alter", action="store_true", help="add or delete credentials of --entity-name")
    u.add_argument("--describe", action="store_true", help="show the mechanisms and iterations of users' credentials")
    u.add_argument("--entity-name", "--user", dest="entity_name", metavar="USER", help="the user")
    u.add_argument("--entity-type", choices=["users"], default="users", help="accepted for kafka-configs.sh compatibility")
    u.add_argument("--add-config", metavar="'SCRAM-SHA-256=[iterations=N,password=P],...'",
                   help="credentials to add or replace")
    u.add_argument("--delete-config", metavar="SCRAM-SHA-256[,SCRAM-SHA-512]", help="credentials to delete")
    add_command_config(u, "client properties (Kafka names: security.protocol, sasl.mechanism, sasl.jaas.config, ...)")
    add_bootstrap(u)
    add_request_timeout(u)
    u.set_defaults(func=cmd_users)
