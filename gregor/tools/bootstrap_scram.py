"""`gregor storage format --add-scram`: SCRAM credentials in a new KRaft cluster's bootstrap records (KIP-900).

A cluster whose brokers talk SASL/SCRAM to each other (or whose clients must log in from the first start)
needs the credentials before any broker can use that listener, and credentials live in the metadata,
which starts empty. As kafka-storage.sh does, `format` on a controller can write them into the bootstrap
records (`<metadata.log.dir>/bootstrap.checkpoint`, gregor.metadata.bootstrap) that the quorum's first
active controller appends to the log, beside the feature levels.

Each `--add-scram` takes Kafka's form `MECHANISM=[name=USER,password=PASSWORD]`, with optional
`iterations=N` (4096..16384, default 4096) and `salt=BASE64`; a value may be double-quoted (to hold a
comma). The password is salted and hashed here: only the stored credential is written.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from gregor.metadata import kraft_records
from gregor.metadata.store import SetEntityConfigs
from gregor.security.principal import sanitize
from gregor.security.sasl.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, credential_from_password
from gregor.tools.common import UsageError

KEYS = ("name", "password", "iterations", "salt")


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """`SCRAM-SHA-256=[name=alice,password=secret]` -> ("SCRAM-SHA-256", {"name": ..., "password": ...})."""
    mech, sep, rest = spec.partition("=")
    mech = mech.strip().upper()
    if not sep or mech not in MECHANISMS:
        raise UsageError(f"--add-scram {spec!r}: expected MECHANISM=[name=...,password=...] with MECHANISM one of "
                         f"{', '.join(MECHANISMS)}")
    rest = rest.strip()
    if not (rest.startswith("[") and rest.endswith("]")):
        raise UsageError(f"--add-scram {spec!r}: the credential goes in brackets: {mech}=[name=...,password=...]")
    fields: dict[str, str] = {}
    for key, value in _pairs(rest[1:-1], spec):
        if key not in KEYS:
            raise UsageError(f"--add-scram {spec!r}: unknown field {key!r} (known: {', '.join(KEYS)})")
        if key in fields:
            raise UsageError(f"--add-scram {spec!r}: {key} given twice")
        fields[key] = value
    for required in ("name", "password"):
        if not fields.get(required):
            raise UsageError(f"--add-scram {spec!r}: {required} is required")
    return mech, fields


def _pairs(body: str, spec: str) -> list[tuple[str, str]]:
    """key=value pairs separated by commas; a double-quoted value may hold commas."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(body):
        eq = body.find("=", i)
        if eq < 0:
            raise UsageError(f"--add-scram {spec!r}: {body[i:]!r} is not key=value")
        key = body[i:eq].strip().lower()
        j = eq + 1
        if j < len(body) and body[j] == '"':
            end = body.find('"', j + 1)
            if end < 0:
                raise UsageError(f"--add-scram {spec!r}: an unterminated quote")
            value, j = body[j + 1:end], end + 1
            if j < len(body) and body[j] != ",":
                raise UsageError(f"--add-scram {spec!r}: text after a quoted value")
        else:
            end = body.find(",", j)
            end = len(body) if end < 0 else end
            value, j = body[j:end].strip(), end
        out.append((key, value))
        i = j + 1
    return out


def credential_records(specs: Sequence[str]) -> list[bytes]:
    """The encoded metadata records holding every credential (one per user, its mechanisms together)."""
    users: dict[str, dict[str, str]] = {}
    for spec in specs:
        mech, fields = parse(spec)
        try:
            iterations = int(fields.get("iterations", MIN_ITERATIONS))
        except ValueError:
            raise UsageError(f"--add-scram {spec!r}: iterations must be a number") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise UsageError(f"--add-scram {spec!r}: iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        salt = None
        if "salt" in fields:
            try:
                salt = base64.b64decode(fields["salt"], validate=True)
            except (binascii.Error, ValueError):
                raise UsageError(f"--add-scram {spec!r}: salt must be base64") from None
        credential = credential_from_password(MECHANISMS[mech], fields["password"], salt, iterations)
        configs = users.setdefault(fields["name"], {})
        if mech in configs:
            raise UsageError(f"--add-scram: {mech} for {fields['name']} given twice")
        configs[mech] = credential.to_config()
    return [kraft_records.encode_change(SetEntityConfigs("users", sanitize(user), configs))
            for user, configs in users.items()]
