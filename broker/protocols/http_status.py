"""The HTTP answer to a core refusal: the one table from :class:`~magnetar.broker.core.errors.ErrorKind` to
the HTTP status of an admin call, a lookup and a refused WebSocket upgrade, as Pulsar answers them
(``RestException``, ``AbstractWebSocketHandler.getErrorCode``): a missing topic 404, a busy producer name or
exclusive subscription 409, a subscription in use or a namespace's topic limit 412, a terminated, closing or
unsettled topic 503, another broker's topic 307 (with its ``Location``), a caller without valid credentials
401 and one whose role may not 403."""

from __future__ import annotations

from magnetar.broker.core import ErrorKind, ServiceError

HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.BUSY: 409,
    ErrorKind.IN_USE: 412,
    ErrorKind.LIMIT_REACHED: 412,
    ErrorKind.NOT_ALLOWED: 500,  # Pulsar's WebSocket proxy answers a NotAllowedError with 500
    ErrorKind.NO_SUBSCRIPTION: 500,  # and a SubscriptionNotFoundException too (no NotFoundException)
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.ELSEWHERE: 307,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.UNASSIGNABLE: 409,
    ErrorKind.INTERNAL: 500,
}


def http_status(exc: ServiceError) -> int:
    """The HTTP status ``exc`` is answered with."""
    return HTTP_STATUS[exc.kind]
