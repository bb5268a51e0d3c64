"""The broker layer's exceptions. Each carries what it becomes on the wire: an HTTP status for a refused
WebSocket upgrade or admin call, or a Pulsar WebSocket error code (``send-error:N`` / close code)."""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every broker-layer exception."""


class InvalidTopicNameError(BrokerError, ValueError):
    """A topic, namespace or tenant name breaks Pulsar's naming rules (Pulsar: ``IllegalArgumentException``;
    400 on a WebSocket upgrade, 412 "Topic name is not valid" on the admin API)."""


class InvalidSubscriptionNameError(InvalidTopicNameError):
    """A subscription name Magnetar cannot store (see :mod:`.subscription_name`): 400 on a WebSocket upgrade,
    412 "Subscription name is not valid" on the admin API."""


class UnsupportedTopicDomainError(InvalidTopicNameError):
    """A ``non-persistent://`` topic: recognised, but Magnetar only stores persistent topics."""


class InvalidMessageIdError(BrokerError, ValueError):
    """Bytes or text that do not decode to a MessageId (Pulsar: ``IOException`` from ``fromByteArray``)."""


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
