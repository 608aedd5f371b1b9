"""A schema registry speaking Confluent's Schema Registry REST API (v1), stored in the `_schemas` topic.

confluent-kafka's SchemaRegistryClient and its Avro, JSON Schema and Protobuf serializers, and curl,
work against it unchanged. Its properties (`schema.registry.*`) and their typed view, RegistryConfig, are
gregor.config.schema_registry: a broker that runs the registry accepts them in server.properties. Modules,
bottom up:

- errors: Confluent's error codes and bodies
- records: the `_schemas` topic's keys and values (Confluent's JSON); state: those records applied in order
- formats: parsing, normalization and compatibility of AVRO, JSON and PROTOBUF schemas
- schemas: request bodies, references and compatibility levels; reads / writes: the endpoints' logic
- kafka: the asyncio Kafka client; store: reading and writing the topic; election: the primary
- auth: basic authentication and ACLs; http_api: the aiohttp routes; server: one instance, started and
  stopped as a whole (`SchemaRegistry`); cli: `gregor schema-registry`
- checks: schema-checked topics (each produced batch's schema ids against a registry, from a bounded cache);
  sources: where those ids are looked up (the broker's own registry, read directly, or one over HTTP);
  formats.payloads: record names and payload decoders for the checks

Everything but errors, cli and checks needs the `registry` extra (aiohttp, avro, jsonschema, protobuf,
grpcio-tools); see docs/schema-registry.md.
"""
