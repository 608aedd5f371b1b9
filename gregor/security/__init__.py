"""Security: listeners, TLS, SASL, authorization and quotas."""
