"""Security: listeners and TLS, SASL authentication, principals, authorization and client quotas.

Each part is sans-IO where it can be (mechanisms, the ACL model, quota arithmetic), so it is tested on
its own; the broker wires them to connections (gregor.network.connection) and requests (gregor.api.context).
"""
