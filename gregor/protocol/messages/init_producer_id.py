"""InitProducerId (key 22): producer id and epoch for idempotent and transactional producers.

Kafka 4.0 accepts 0-5 (v6, two-phase commit for KIP-939, came later). Without it
advertised, idempotent produce fails in every Python client (see FINDINGS.md).
"""

from __future__ import annotations

from gregor.protocol.schema import INT16, INT32, INT64, STRING, api, f

INIT_PRODUCER_ID = api(
    22,
    "InitProducerId",
    versions="0-5",
    flexible="2+",
    request=[
        f("transactional_id", STRING, nullable="0+"),
        f("transaction_timeout_ms", INT32),
        # v3+: the current id/epoch, so a producer can bump its epoch after INVALID_PRODUCER_EPOCH.
        f("producer_id", INT64, "3+", default=-1),
        f("producer_epoch", INT16, "3+", default=-1),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("producer_id", INT64, default=-1),
        f("producer_epoch", INT16),
    ],
)
