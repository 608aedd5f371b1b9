"""ApiVersions (key 18): what the broker serves. Responses always use header v0."""

from gregor.protocol.schema import BOOL, INT16, INT32, INT64, STRING, api, f

API_VERSIONS = api(
    18,
    "ApiVersions",
    versions="0-4",
    flexible="3+",
    request=[
        f("client_software_name", STRING, "3+"),
        f("client_software_version", STRING, "3+"),
    ],
    response=[
        f("error_code", INT16),
        f("api_keys", [
            f("api_key", INT16),
            f("min_version", INT16),
            f("max_version", INT16),
        ]),
        f("throttle_time_ms", INT32, "1+"),
        f("supported_features", [
            f("name", STRING, "3+"),
            f("min_version", INT16, "3+"),
            f("max_version", INT16, "3+"),
        ], "none", tag=0, tagged="3+"),
        f("finalized_features_epoch", INT64, "none", tag=1, tagged="3+", default=-1),
        f("finalized_features", [
            f("name", STRING, "3+"),
            f("max_version_level", INT16, "3+"),
            f("min_version_level", INT16, "3+"),
        ], "none", tag=2, tagged="3+"),
        f("zk_migration_ready", BOOL, "none", tag=3, tagged="3+"),
    ],
)
