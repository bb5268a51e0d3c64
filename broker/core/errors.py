"""What the broker service refuses, whatever protocol asked, as protocol-neutral kinds (:class:`ErrorKind`):
the core says *what* went wrong, and each adapter answers it in its own terms from one table of its own - the
HTTP status of an admin call or a refused WebSocket upgrade (:mod:`magnetar.broker.protocols.http_status`), a
WebSocket close code, later a Pulsar ``ServerError``.

The base :class:`~magnetar.broker.wire.errors.BrokerError` and the errors of names, ids and entries are in
:mod:`magnetar.broker.wire.errors` (clients import them without the server).
"""

from __future__ import annotations

from enum import Enum

from magnetar.broker.wire import BrokerError


class ErrorKind(Enum):
    """What kind of refusal a :class:`ServiceError` is; adapters map each kind to their own code."""

    NOT_FOUND = "not found"
    """No such topic or namespace."""
    BUSY = "busy"
    """Another client holds what was asked for (a producer name, an exclusive subscription)."""
    IN_USE = "in use"
    """The thing is in use and cannot be changed now (a subscription with connected consumers)."""
    LIMIT_REACHED = "limit reached"
    """One more would exceed a configured limit."""
    NOT_ALLOWED = "not allowed"
    """A policy forbids it (one more subscription than the topic's policy allows)."""
    NO_SUBSCRIPTION = "no such subscription"
    """The subscription does not exist and the policies forbid creating it."""
    UNAVAILABLE = "unavailable"
    """Not now: the topic is terminated, closing or its bundle not settled; look it up again or retry."""
    ELSEWHERE = "served elsewhere"
    """Another broker serves it (:class:`NotOwnerError` names which)."""
    UNAUTHENTICATED = "unauthenticated"
    """The caller could not be authenticated (no credentials where they are required, or bad ones)."""
    FORBIDDEN = "forbidden"
    """The caller's role may not do this."""
    UNASSIGNABLE = "cannot assign"
    """The dispatcher cannot take the consumer as asked (Key_Shared hash ranges that overlap another
    consumer's, or are not valid ranges)."""
    INTERNAL = "internal"
    """Anything else."""


class ServiceError(BrokerError):
    """A request the broker service refuses; ``kind`` says what kind of refusal it is."""

    kind = ErrorKind.INTERNAL


class TopicNotFoundError(ServiceError):
    """Pulsar's ``TopicDoesNotExistException`` / ``NotFoundException``: no such topic and auto-creation is
    off, or its namespace does not exist."""

    kind = ErrorKind.NOT_FOUND


class ProducerBusyError(ServiceError):
    """Pulsar's ``ProducerBusyException``: a producer of that name is already connected."""

    kind = ErrorKind.BUSY


class ProducerFencedError(ServiceError):
    """Pulsar's ``ProducerFencedException``: exclusive access refused or lost (another producer holds the
    topic, or the topic epoch moved past the producer's)."""

    kind = ErrorKind.BUSY


class ConsumerBusyError(ServiceError):
    """Pulsar's ``ConsumerBusyException``: an exclusive subscription already has its consumer, or the
    subscription type differs from the one in use."""

    kind = ErrorKind.BUSY


class TooManyProducersError(ProducerBusyError):
    """The topic has its policy's ``maxProducersPerTopic`` producers (Pulsar's "Topic '<t>' reached max
    producers limit", a ``ProducerBusy``)."""


class TooManyConsumersError(ConsumerBusyError):
    """The topic or subscription has its policy's ``maxConsumersPerTopic`` / ``maxConsumersPerSubscription``
    consumers (Pulsar's "Topic reached max consumers limit" / "Subscription reached max consumers limit")."""


class TooManySubscriptionsError(ServiceError):
    """A new subscription beyond the policy's ``maxSubscriptionsPerTopic`` (Pulsar's ``NotAllowedError``
    "Exceed the maximum number of subscriptions of the topic: <t>")."""

    kind = ErrorKind.NOT_ALLOWED


class DeliveryDelayTooLongError(ServiceError):
    """A message delayed beyond the policy's ``maxDeliveryDelayInMillis`` (Pulsar's ``NotAllowedError``
    "Exceeds max allowed delivery delay of N milliseconds")."""

    kind = ErrorKind.NOT_ALLOWED


class SubscribeRateLimitedError(ServiceError):
    """The consumer subscribed more often than the topic's ``subscribeRate`` allows (Pulsar's
    ``NotAllowedError`` "Subscribe limited by subscribe rate limit per consumer.")."""

    kind = ErrorKind.NOT_ALLOWED


class ReservedSubscriptionError(ServiceError):
    """A subscription named as a cursor the broker keeps for itself (``pulsar.dedup``): Pulsar's
    ``NotAllowedError`` "Subscription with reserved subscription name attempted"."""

    kind = ErrorKind.NOT_ALLOWED


class SubscriptionNotFoundError(ServiceError):
    """Subscribing with a new name while the policies turn automatic subscription creation off (Pulsar's
    ``SubscriptionNotFound`` "Subscription does not exist")."""

    kind = ErrorKind.NO_SUBSCRIPTION


class TopicTerminatedError(ServiceError):
    """Pulsar's ``TopicTerminatedException`` (on producer creation)."""

    kind = ErrorKind.UNAVAILABLE


class TopicClosedError(ServiceError):
    """The topic is being unloaded or its bundle was lost; the client should look it up again."""

    kind = ErrorKind.UNAVAILABLE


class ServiceUnitNotReadyError(ServiceError):
    """The bundle's ownership could not be settled (metadata store unavailable, a race): retry."""

    kind = ErrorKind.UNAVAILABLE


class ConsumerAssignError(ServiceError):
    """Pulsar's ``ConsumerAssignException``: a Key_Shared sticky consumer's hash ranges are invalid or
    overlap another consumer's."""

    kind = ErrorKind.UNASSIGNABLE


class SubscriptionBusyError(ServiceError):
    """Pulsar's "Subscription has active connected consumers"."""

    kind = ErrorKind.IN_USE


class TooManyTopicsError(ServiceError):
    """Creating one more topic would exceed ``topics_per_namespace_max`` (Pulsar's ``maxTopicsPerNamespace``,
    "Exceed maximum number of topics in namespace")."""

    kind = ErrorKind.LIMIT_REACHED


class NotOwnerError(ServiceError):
    """This broker does not own the topic's bundle; ``http_url`` is the owner's, and ``http_url_tls`` its TLS
    URL when it serves one (a client that came over TLS is sent there)."""

    kind = ErrorKind.ELSEWHERE

    def __init__(self, message: str, http_url: str, http_url_tls: str = "") -> None:
        super().__init__(message)
        self.http_url = http_url
        self.http_url_tls = http_url_tls


class AccessError(ServiceError):
    """A refusal of the broker's security (:mod:`magnetar.broker.security`). Its message is the whole
    answer, in Pulsar's words (``Failed to authenticate: ...``, ``Not authorized: ...``): a protocol passes
    it on as it is, with its own code for the kind."""


class NotAuthenticatedError(AccessError):
    """The caller presented no valid credentials where they are required (Pulsar's
    ``AuthenticationException``)."""

    kind = ErrorKind.UNAUTHENTICATED


class NotAuthorizedError(AccessError):
    """The caller's role may not do what it asked (Pulsar's ``AuthorizationException``)."""

    kind = ErrorKind.FORBIDDEN


class AuthorizationUncheckedError(AccessError):
    """The grants could not be read (the metadata store is away): neither allowed nor refused; retry."""

    kind = ErrorKind.UNAVAILABLE
