"""The broker's security: authentication, authorization and the protective limits.

:mod:`.broker_security` is what every entry point calls first (authenticate, authorize, rate limits); it
refuses with protocol-neutral errors, and each front (HTTP routes, the WebSocket upgrade, later other
protocols) answers them in its own terms. :mod:`.authorization` is Pulsar's authorization provider over the
namespace policies; :mod:`.settings` declares the settings and builds the whole from them.
"""
