"""Security: listeners and TLS, SASL authentication, principals, authorization and client quotas.

Each part is sans-IO where it can be (mechanisms, the ACL model, quota arithmetic), so it is tested on
its own; the server wires them to connections (gregor.server.network) and requests (gregor.server.dispatcher).
"""
