"""Our own definitions of the Kafka messages, one module per API or family of APIs."""
