"""The broker's security: authentication, authorization and the protective limits.

:mod:`.broker_security` is what every entry point calls first (authenticate, authorize, rate limits); it
refuses with protocol-neutral errors, and each front (HTTP routes, the WebSocket upgrade, later other
protocols) answers them in its own terms. :mod:`.authorization` is Pulsar's authorization provider over the
namespace policies; :mod:`.settings` declares the settings and builds the whole from them.
"""

from magnetar.broker.security.authorization import (
    ROLE_BYTES_MAX,
    AuthAction,
    AuthorizationService,
    AuthorizationSettings,
    NamespaceOperation,
    TopicOperation,
    check_role_name,
    parse_actions,
)
from magnetar.broker.security.broker_security import BrokerSecurity, PublishLimiter
from magnetar.broker.security.settings import SecuritySettings, build_security

__all__ = [
    "ROLE_BYTES_MAX",
    "AuthAction",
    "AuthorizationService",
    "AuthorizationSettings",
    "BrokerSecurity",
    "NamespaceOperation",
    "PublishLimiter",
    "SecuritySettings",
    "TopicOperation",
    "build_security",
    "check_role_name",
    "parse_actions",
]
