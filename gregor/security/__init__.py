"""Security: listeners and TLS, SASL authentication, principals, authorization and client quotas.

Each part is sans-IO where it can be (mechanisms, the ACL model, quota arithmetic), so it is tested on
its own; the server wires them to connections (gregor.network.socket_server) and requests (gregor.api.dispatcher).
"""
