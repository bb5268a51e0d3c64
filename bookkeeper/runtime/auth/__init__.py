"""Authentication, authorization errors and TLS shared by brokers and bookies (Pulsar's token provider).

* :mod:`.keys` - key settings (``data:``/``file:``/base64), loading and generating secret keys and key pairs;
* :mod:`.tokens` - creating and verifying JWTs (HS*/RS*/PS*/ES*), with typed refusals;
* :mod:`.authentication` - ``AuthenticationSettings`` and the ``AuthenticationService`` that turns a request
  head (``Authorization: Bearer`` or a WebSocket's ``token`` parameter) into a role or a 401;
* :mod:`.tls` - SSL contexts from certificate files and the bounded server/client handshake;
* :mod:`.errors` - the exceptions, each with the HTTP status it becomes.

The package imports nothing eagerly (the HTTP server imports :mod:`.tls` alone, which must not load the JWT
and key libraries): import the submodule you need.
"""
