"""SCRAM credential administration (KIP-554): DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51), both v0 only and flexible in Kafka 4.0.

Mechanisms travel as numbers (ScramMechanism.type: 0 unknown, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
An upsertion carries the salt and the salted password Hi(password, salt, iterations) computed by
the client; the broker derives and stores StoredKey and ServerKey, never the password.
A null user list in Describe means every user with a credential.
"""

from __future__ import annotations

from gregor.protocol.schema import BYTES, INT8, INT16, INT32, STRING, api, f

DESCRIBE_USER_SCRAM_CREDENTIALS = api(
    50,
    "DescribeUserScramCredentials",
    versions="0",
    flexible="0+",
    request=[
        f("users", [
            f("name", STRING),
        ], nullable="0+"),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("results", [
            f("user", STRING),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("credential_infos", [
                f("mechanism", INT8),
                f("iterations", INT32),
            ]),
        ]),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS = api(
    51,
    "AlterUserScramCredentials",
    versions="0",
    flexible="0+",
    request=[
        f("deletions", [
            f("name", STRING),
            f("mechanism", INT8),
        ]),
        f("upsertions", [
            f("name", STRING),
            f("mechanism", INT8),
            f("iterations", INT32),
            f("salt", BYTES),
            f("salted_password", BYTES),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("results", [
            f("user", STRING),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
        ]),
    ],
)
