"""Typed columns: Confluent-framed Avro, JSON Schema and Protobuf payloads to Apache Arrow arrays and back,
with schemas from a Confluent-compatible schema registry.

    from gregor.typed import RegistryClient, arrow_type_for, decode_column, encode_column

    registry = RegistryClient.from_options({"schema.registry.url": "http://127.0.0.1:8081"})
    t = arrow_type_for(registry, subject="pageviews-value")             # pa.StructType, Spark-compatible
    decoded = decode_column(values, registry, subject="pageviews-value", mode="PERMISSIVE")
    decoded.value      # typed values (null for a null or corrupt payload)
    decoded.corrupt    # the raw bytes of each corrupt payload, null elsewhere (Spark's _corrupt_record)
    payloads = encode_column(decoded.value, registry, "pageviews-value", schema_type="AVRO")

Records written with any version of the subject's schema are read into the chosen (reader) version.
Spark's source and sink use `TypedColumn` (gregor.typed.columns) through their options. Modules:
registry_client (cached lookups), codec (framing, grouping by schema id, modes), avro_types /
avro_plan / _avrodecode.c / avro_resolve / avro_values / avro_codec (Avro), json_codec, protobuf_codec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gregor.typed.errors import CorruptRecordError, RegistryLookupError, TypedError, UnsupportedSchema
from gregor.typed.registry_client import RegistryClient, RegistryOptions, SchemaInfo, client_for

if TYPE_CHECKING:
    import pyarrow as pa

    from gregor.typed.codec import DecodedColumn


def arrow_type_for(registry: RegistryClient, *, subject: str = "", version: int | str | None = None,
                   schema_id: int | None = None, message_name: str | None = None) -> pa.DataType:
    """The Arrow type values of a schema decode to (a subject's version, latest by default, or an id)."""
    from gregor.typed.columns import load_schema, make_decoder

    info = load_schema(registry, subject=subject, version=version, schema_id=schema_id)
    return make_decoder(info, registry, message_name).arrow_type  # type: ignore[no-any-return]


def spark_schema_for(subject: str, registry: RegistryClient, version: int | str | None = None,
                     schema_id: int | None = None, message_name: str | None = None) -> Any:
    """The pyspark DataType of a schema's values (a StructType for records, messages and objects)."""
    from gregor.typed.columns import spark_type

    return spark_type(arrow_type_for(registry, subject=subject, version=version, schema_id=schema_id,
                                     message_name=message_name))


def decode_column(values: pa.Array, registry: RegistryClient, *, subject: str = "", version: int | str | None = None,
                  schema_id: int | None = None, mode: str = "FAILFAST", message_name: str | None = None,
                  offsets: Any = None) -> DecodedColumn:
    """Decode a binary column of Confluent-framed payloads into the reader schema's type."""
    from gregor.typed.codec import ColumnDecoder
    from gregor.typed.columns import load_schema, make_decoder

    info = load_schema(registry, subject=subject, version=version, schema_id=schema_id)
    decoder = ColumnDecoder(make_decoder(info, registry, message_name), registry, mode)
    return decoder.decode(values, offsets)


def encode_column(values: pa.Array, registry: RegistryClient, subject: str, *, schema_type: str = "AVRO",
                  schema: str | None = None, auto_register: bool = False, message_name: str | None = None) -> pa.Array:
    """Encode typed values as Confluent-framed payloads with `schema` (registered first when `auto_register`,
    else looked up in the subject) or, without one, the subject's latest version."""
    from gregor.typed.columns import SCHEMA_TYPES, ColumnOptions, ColumnWriter

    types = {v: k for k, v in SCHEMA_TYPES.items()}
    if schema_type.upper() not in types:
        raise ValueError(f"schema_type must be AVRO, JSON or PROTOBUF, not {schema_type!r}")
    opts = ColumnOptions("value", types[schema_type.upper()], subject, schema=schema, auto_register=auto_register,
                         message_name=message_name, registry=registry.options)
    return ColumnWriter(opts, registry).encode(values)


__all__ = ["CorruptRecordError", "RegistryClient", "RegistryLookupError", "RegistryOptions", "SchemaInfo",
           "TypedError", "UnsupportedSchema", "arrow_type_for", "client_for", "decode_column", "encode_column",
           "spark_schema_for"]
