"""Pulsar's ``ServerError`` for what the broker core refuses, by the refusal's protocol-neutral kind (the
binary protocol's counterpart of :mod:`magnetar.broker.protocols.http_status`), and for a topic name that
does not parse: the one table every handler of the binary port answers with."""

from __future__ import annotations

from magnetar.broker.core import ErrorKind, ServiceError
from magnetar.broker.protocols.pulsar_binary.commands import ServerError
from magnetar.broker.wire import InvalidTopicNameError

_ERRORS = {
    ErrorKind.NOT_FOUND: ServerError.TopicNotFound,
    ErrorKind.BUSY: ServerError.ConsumerBusy,
    ErrorKind.IN_USE: ServerError.ConsumerBusy,
    ErrorKind.LIMIT_REACHED: ServerError.NotAllowedError,
    ErrorKind.NOT_ALLOWED: ServerError.NotAllowedError,
    ErrorKind.NO_SUBSCRIPTION: ServerError.SubscriptionNotFound,
    ErrorKind.UNAVAILABLE: ServerError.ServiceNotReady,
    ErrorKind.ELSEWHERE: ServerError.ServiceNotReady,
    ErrorKind.UNAUTHENTICATED: ServerError.AuthenticationError,
    ErrorKind.FORBIDDEN: ServerError.AuthorizationError,
    ErrorKind.UNASSIGNABLE: ServerError.ConsumerAssignError,
    ErrorKind.INTERNAL: ServerError.UnknownError,
}


def server_error_of(exc: ServiceError | InvalidTopicNameError) -> ServerError:
    """Pulsar's error for a refusal of the core (by its kind), or ``InvalidTopicName``."""
    if isinstance(exc, InvalidTopicNameError):
        return ServerError.InvalidTopicName
    return _ERRORS.get(exc.kind, ServerError.UnknownError)
