"""What the broker service refuses, whatever protocol asked: each refusal carries the HTTP status it is
answered with on a WebSocket upgrade or an admin call; a protocol adapter turns it into its own terms.

The base :class:`~magnetar.broker.wire.errors.BrokerError` and the errors of names, ids and entries are in
:mod:`magnetar.broker.wire.errors` (clients import them without the server).
"""

from __future__ import annotations

from magnetar.broker.wire.errors import BrokerError


class ServiceError(BrokerError):
    """A request the broker service refuses; ``status`` is the HTTP status of a refused WebSocket upgrade or
    admin call (Pulsar's ``AbstractWebSocketHandler.getErrorCode`` / ``RestException``)."""

    status = 500


class TopicNotFoundError(ServiceError):
    """Pulsar's ``TopicDoesNotExistException`` / ``NotFoundException`` (404): no such topic and auto-creation
    is off, or its namespace does not exist."""

    status = 404


class ProducerBusyError(ServiceError):
    """Pulsar's ``ProducerBusyException`` (409): a producer of that name is already connected."""

    status = 409


class ConsumerBusyError(ServiceError):
    """Pulsar's ``ConsumerBusyException`` (409): an exclusive subscription already has its consumer, or the
    subscription type differs from the one in use."""

    status = 409


class TopicTerminatedError(ServiceError):
    """Pulsar's ``TopicTerminatedException`` (503 on producer creation)."""

    status = 503


class TopicClosedError(ServiceError):
    """The topic is being unloaded or its bundle was lost; the client should look it up again (503)."""

    status = 503


class ServiceUnitNotReadyError(ServiceError):
    """The bundle's ownership could not be settled (metadata store unavailable, a race): retry (503)."""

    status = 503


class SubscriptionBusyError(ServiceError):
    """Pulsar's "Subscription has active connected consumers" (412)."""

    status = 412


class TooManyTopicsError(ServiceError):
    """Creating one more topic would exceed ``topics_per_namespace_max`` (Pulsar's ``maxTopicsPerNamespace``,
    412 "Exceed maximum number of topics in namespace")."""

    status = 412


class NotOwnerError(ServiceError):
    """This broker does not own the topic's bundle; ``http_url`` is the owner's (307 redirect), and
    ``http_url_tls`` its TLS URL when it serves one (a client that came over TLS is sent there)."""

    status = 307

    def __init__(self, message: str, http_url: str, http_url_tls: str = "") -> None:
        super().__init__(message)
        self.http_url = http_url
        self.http_url_tls = http_url_tls


class SessionRefusedError(BrokerError):
    """A client session refused before it began, answered with ``status`` and ``{"reason": reason}`` in the
    session's own words: authentication (401), authorization (403), grants that could not be read (503),
    and every refusal of a WebSocket upgrade
    (:class:`~magnetar.broker.protocols.ws_errors.WsUpgradeError`)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
