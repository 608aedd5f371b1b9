"""SASL authentication, sans-IO: the mechanisms (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), the JAAS
config parser, the per-connection state machine and a client for inter-broker authentication.

Nothing here touches a socket: gregor.api.handlers.sasl drives these objects from the
SaslHandshake and SaslAuthenticate requests.
"""
