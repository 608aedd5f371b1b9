"""Sans-IO Kafka protocol: primitives, message schemas, frames, record batches. No sockets here."""
