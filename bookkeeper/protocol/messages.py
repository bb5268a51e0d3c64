"""Request and response messages of the bookie protocol.

These are the values the codec (:mod:`.codec`) turns into frames and back. Every request carries a
``request_id`` chosen by the client (BookKeeper's ``txnId``) so that many requests can be in flight on one
connection and responses may come back in any order; the response echoes it. Messages are immutable and
validated on construction: a message that exists is well formed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from magnetar.bookkeeper.protocol.status import ENTRY_ID_LAST, MASTER_KEY_BYTES, BookieStatus

REQUEST_ID_MAX = 2**63 - 1
ID_MAX = 2**63 - 1


class InvalidMessageError(ValueError):
    """A message field is out of range; on the wire this is EBADREQ."""


def _check_id(name: str, value: int, low: int = 0) -> None:
    if not (low <= value <= ID_MAX):
        raise InvalidMessageError(f"{name}={value} out of range [{low}, {ID_MAX}]")


def _check_key(master_key: bytes) -> None:
    if len(master_key) != MASTER_KEY_BYTES:
        raise InvalidMessageError(f"master key must be {MASTER_KEY_BYTES} bytes, got {len(master_key)}")


@dataclass(frozen=True, slots=True)
class AddRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    """The packaged entry (header + digest + payload), stored verbatim by the bookie - or, when ``tail`` is
    not empty, its first bytes (at least the header)."""
    recovery: bool = False
    """RECOVERY_ADD: accepted on a fenced ledger (used by ledger recovery)."""
    high_priority: bool = False
    tail: tuple[bytes | memoryview, ...] = ()
    """The rest of the packaged entry after ``body``, in parts sent as they are (the writer's payload parts:
    never joined on the way to the socket). A decoded request has none."""

    def whole(self) -> AddRequest:
        """This request with its tail joined into ``body`` (itself when it has no tail)."""
        return replace(self, body=b"".join((self.body, *self.tail)), tail=()) if self.tail else self

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)
        _check_id("ledger_id", self.ledger_id)
        _check_id("entry_id", self.entry_id)
        _check_key(self.master_key)


@dataclass(frozen=True, slots=True)
class AddResponse:
    request_id: int
    status: BookieStatus
    ledger_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class ReadRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    """An entry id, or ``ENTRY_ID_LAST`` (-1) for the last entry the bookie has."""
    fence: bool = False
    master_key: bytes | None = None
    """Required with ``fence``: the bookie checks it before fencing (EUA on mismatch)."""
    high_priority: bool = False

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)
        _check_id("ledger_id", self.ledger_id)
        _check_id("entry_id", self.entry_id, low=ENTRY_ID_LAST)
        if self.fence:
            if self.master_key is None:
                raise InvalidMessageError("a fencing read needs the master key")
            _check_key(self.master_key)
        elif self.master_key is not None:
            raise InvalidMessageError("a master key is only sent with a fencing read")


@dataclass(frozen=True, slots=True)
class ReadResponse:
    request_id: int
    status: BookieStatus
    ledger_id: int
    entry_id: int
    body: bytes = b""
    """The packaged entry when status is EOK (its header carries the piggybacked LAC)."""


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    request_id: int
    ledger_id: int

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)
        _check_id("ledger_id", self.ledger_id)


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    request_id: int
    status: BookieStatus
    ledger_id: int
    lac_body: bytes = b""
    """The explicit LAC body last written with WRITE_LAC, or empty."""
    last_entry_body: bytes = b""
    """The last packaged entry the bookie stores for the ledger, or empty."""


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    request_id: int
    ledger_id: int
    lac: int
    master_key: bytes
    body: bytes

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)
        _check_id("ledger_id", self.ledger_id)
        _check_id("lac", self.lac, low=-1)
        _check_key(self.master_key)


@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    request_id: int
    status: BookieStatus
    ledger_id: int


BOOKIE_INFO_TOTAL_DISK = 0x1
BOOKIE_INFO_FREE_DISK = 0x2


@dataclass(frozen=True, slots=True)
class GetBookieInfoRequest:
    request_id: int
    requested: int = BOOKIE_INFO_TOTAL_DISK | BOOKIE_INFO_FREE_DISK

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)


@dataclass(frozen=True, slots=True)
class GetBookieInfoResponse:
    request_id: int
    status: BookieStatus
    total_disk_bytes: int = 0
    free_disk_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """Answer to a frame the server could not decode into a request (EBADREQ) or will not serve.

    ``request_id`` is the id read from the frame header when it could be read, else 0.
    """

    request_id: int
    status: BookieStatus
    message: str = ""


AUTH_PLUGIN_TOKEN = "token"
"""The plugin whose payload is a token (the method name of Pulsar's ``AuthenticationProviderToken``)."""
AUTH_PLUGIN_NAME_BYTES_MAX = 255
AUTH_PAYLOAD_BYTES_MAX = 64 * 1024


def _check_auth(plugin_name: str, payload: bytes) -> None:
    name_bytes = len(plugin_name.encode("utf-8", errors="replace"))
    if not 0 < name_bytes <= AUTH_PLUGIN_NAME_BYTES_MAX:
        raise InvalidMessageError(f"auth plugin name of {name_bytes} bytes (1..{AUTH_PLUGIN_NAME_BYTES_MAX})")
    if len(payload) > AUTH_PAYLOAD_BYTES_MAX:
        raise InvalidMessageError(f"auth payload of {len(payload)} bytes exceeds {AUTH_PAYLOAD_BYTES_MAX}")


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """The first message of a connection to a bookie that requires authentication (BookKeeper's AUTH with an
    ``AuthMessage{authPluginName, payload}``). It is a connection-level message, not a ledger request: it is
    not part of :data:`Request` and never reaches the request logic."""

    request_id: int
    plugin_name: str
    payload: bytes = field(repr=False)
    """The credential (for ``token``: the JWT, ASCII). Kept out of ``repr`` so it never reaches a log."""

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)
        _check_auth(self.plugin_name, self.payload)


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """EOK: the connection is authenticated; EUA: refused, ``payload`` is the reason (UTF-8) and the bookie
    closes the connection."""

    request_id: int
    status: BookieStatus
    plugin_name: str
    payload: bytes = b""

    def __post_init__(self) -> None:
        _check_auth(self.plugin_name, self.payload)

    @property
    def reason(self) -> str:
        return self.payload.decode("utf-8", errors="replace")


Request = AddRequest | ReadRequest | ReadLacRequest | WriteLacRequest | GetBookieInfoRequest
Response = (
    AddResponse | ReadResponse | ReadLacResponse | WriteLacResponse | GetBookieInfoResponse | ErrorResponse
)
