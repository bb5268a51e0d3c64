"""Error surface of Pulsar's WebSocket API: upgrade failures (HTTP status) and runtime errors (codes 1-8).

Upgrade failures. Pulsar answers a failed producer/consumer/reader creation on the upgrade request itself
(``AbstractWebSocketHandler.getErrorCode``/``getErrorMessage``); :data:`UPGRADE_FAILURE_STATUS` is that table.
The reason is ``"Invalid query params: <detail>"`` for a bad argument (400) and
``"Failed to create producer/consumer: <detail>"`` otherwise (Pulsar's wording, "producer/consumer" included);
authentication and authorization failures have fixed reasons. Pulsar threw path-parsing errors outside its
try/catch, so users saw a 500 for a malformed URL (a known upstream bug); Magnetar answers them 400
``"Invalid WebSocket path: <what is wrong and the path the endpoint expects>"``.

Runtime errors. ``WebSocketError`` codes 1-8 appear in ``"send-error:N"`` producer acks and as the close code
of a session Pulsar closes. RFC 6455 §7.4 reserves close codes 0-999 (unusable) and 4000-4999 for private use,
and clients such as Python ``websockets`` reject a Close frame carrying code 3; so on the wire Magnetar sends
``4000 + N`` (4001 "Failed to create producer" ... 4008 "Unknown error") with Pulsar's description as the
reason. ``send-error:N`` keeps the original N.
"""

from __future__ import annotations

from enum import Enum, IntEnum

from magnetar.broker.wire import BrokerError

WS_CLOSE_CODE_BASE = 4000


class WsErrorCode(IntEnum):
    """Pulsar's ``WebSocketError``."""

    FAILED_TO_CREATE_PRODUCER = 1
    FAILED_TO_SUBSCRIBE = 2
    FAILED_TO_DESERIALIZE_FROM_JSON = 3
    FAILED_TO_SERIALIZE_TO_JSON = 4
    AUTHENTICATION_ERROR = 5
    NOT_AUTHORIZED_ERROR = 6
    PAYLOAD_ENCODING_ERROR = 7
    UNKNOWN_ERROR = 8

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    @property
    def close_code(self) -> int:
        """The WebSocket close code Magnetar sends for this error: ``4000 + N``."""
        return WS_CLOSE_CODE_BASE + int(self)

    @property
    def send_error(self) -> str:
        """The ``result`` of a failed producer ack: ``"send-error:N"``."""
        return f"send-error:{int(self)}"


_DESCRIPTIONS = {
    WsErrorCode.FAILED_TO_CREATE_PRODUCER: "Failed to create producer",
    WsErrorCode.FAILED_TO_SUBSCRIBE: "Failed to subscribe",
    WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON: "Failed to de-serialize from JSON",
    WsErrorCode.FAILED_TO_SERIALIZE_TO_JSON: "Failed to serialize to JSON",
    WsErrorCode.AUTHENTICATION_ERROR: "Failed to authenticate client",
    WsErrorCode.NOT_AUTHORIZED_ERROR: "Client is not authorized",
    WsErrorCode.PAYLOAD_ENCODING_ERROR: "Invalid payload encoding",
    WsErrorCode.UNKNOWN_ERROR: "Unknown error",
}


def close_reason(code: WsErrorCode, message: str = "") -> str:
    """Pulsar's close reason: the description, then ``": message"`` when there is one (``close(error, msg)``).
    Truncated to fit a Close frame (123 bytes of UTF-8)."""
    reason = f"{code.description}: {message}" if message else code.description
    encoded = reason.encode("utf-8")[:123]
    return encoded.decode("utf-8", errors="ignore")


class UpgradeFailure(Enum):
    """Why a producer/consumer/reader could not be created (the Java exceptions of ``getErrorCode``)."""

    INVALID_ARGUMENT = "IllegalArgumentException"
    AUTHENTICATION = "AuthenticationException"
    AUTHORIZATION = "AuthorizationException"
    NOT_FOUND = "NotFoundException / TopicDoesNotExistException"
    BUSY = "ProducerBusy / ConsumerBusy / ProducerFenced / IncompatibleSchema"
    TOO_MANY_REQUESTS = "TooManyRequestsException"
    QUOTA_EXCEEDED_OR_TERMINATED = "ProducerBlockedQuotaExceeded{Error,Exception} / TopicTerminatedException"
    TIMEOUT = "TimeoutException"
    OTHER = "any other exception"


UPGRADE_FAILURE_STATUS: dict[UpgradeFailure, int] = {
    UpgradeFailure.INVALID_ARGUMENT: 400,
    UpgradeFailure.AUTHENTICATION: 401,
    UpgradeFailure.AUTHORIZATION: 403,
    UpgradeFailure.NOT_FOUND: 404,
    UpgradeFailure.BUSY: 409,
    UpgradeFailure.TOO_MANY_REQUESTS: 429,
    UpgradeFailure.QUOTA_EXCEEDED_OR_TERMINATED: 503,
    UpgradeFailure.TIMEOUT: 504,
    UpgradeFailure.OTHER: 500,
}


class WsUpgradeError(BrokerError):
    """A refused WebSocket upgrade: answered with ``status`` and ``{"reason": reason}``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason

    @classmethod
    def of(cls, failure: UpgradeFailure, detail: str) -> WsUpgradeError:
        """The status and reason Pulsar gives ``failure`` (see the module docstring)."""
        status = UPGRADE_FAILURE_STATUS[failure]
        if failure is UpgradeFailure.INVALID_ARGUMENT:
            return cls(status, f"Invalid query params: {detail}")
        if failure is UpgradeFailure.AUTHENTICATION:
            return cls(status, "Failed to authenticate")
        if failure is UpgradeFailure.AUTHORIZATION:
            return cls(status, "Not authorized")
        return cls(status, f"Failed to create producer/consumer: {detail}")

    @classmethod
    def invalid(cls, detail: str) -> WsUpgradeError:
        return cls.of(UpgradeFailure.INVALID_ARGUMENT, detail)

    @classmethod
    def invalid_path(cls, detail: str) -> WsUpgradeError:
        """A malformed upgrade path (400 ``"Invalid WebSocket path: ..."``): the reason says what is wrong
        with the path, not with query parameters."""
        return cls(
            UPGRADE_FAILURE_STATUS[UpgradeFailure.INVALID_ARGUMENT], f"Invalid WebSocket path: {detail}"
        )


class WsSessionError(BrokerError):
    """A runtime error closing the session with ``code.close_code`` (Pulsar: ``close(WebSocketError)``)."""

    def __init__(self, code: WsErrorCode, message: str = "") -> None:
        super().__init__(close_reason(code, message))
        self.code = code
        self.message = message

    @property
    def close_code(self) -> int:
        return self.code.close_code

    @property
    def reason(self) -> str:
        return close_reason(self.code, self.message)
