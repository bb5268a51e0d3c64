"""The commands of Pulsar's binary protocol that Magnetar reads and writes, as frozen, validated values.

A ``BaseCommand`` is a ``type`` enum (field 1) plus one sub-message whose field number equals the type's
value. :func:`decode_command` turns a command's bytes into one of the dataclasses below (every field checked
for type and range when it is built, so a handler never sees a half-valid command), or
:class:`UnsupportedCommand` for a type Magnetar does not serve - still carrying its ``request_id`` when the
type has one, so the refusal can name the request. What the broker sends is built by :mod:`.encoders`.

Message metadata and the batch payload layout are :mod:`.metadata`; the frame around all of it is
:mod:`.framing`.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.protocols.pulsar_binary.consumer_commands import (
    GetLastMessageId,
    Seek,
    decode_get_last_message_id,
    decode_seek,
    signed_id,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import (
    Fields,
    ProtobufError,
    parse_message,
)
from magnetar.broker.protocols.pulsar_binary.schema_commands import (
    GetOrCreateSchema,
    GetSchema,
    WireSchema,
    decode_get_or_create_schema,
    decode_get_schema,
    optional_schema,
)
from magnetar.broker.protocols.pulsar_binary.topic_list import GetTopics, decode_get_topics

PROTOCOL_VERSION_MAX = 21
"""The newest protocol version we answer with; CONNECTED carries min(this, the client's)."""
BATCH_MESSAGES_MAX = 65_535
"""Messages one client batch may hold."""
PROPERTIES_MAX = 1024
"""Properties one message may carry."""
SERVER_VERSION = "Magnetar"


class CommandType(enum.IntEnum):
    CONNECT = 2
    CONNECTED = 3
    SUBSCRIBE = 4
    PRODUCER = 5
    SEND = 6
    SEND_RECEIPT = 7
    SEND_ERROR = 8
    MESSAGE = 9
    ACK = 10
    FLOW = 11
    UNSUBSCRIBE = 12
    SUCCESS = 13
    ERROR = 14
    CLOSE_PRODUCER = 15
    CLOSE_CONSUMER = 16
    PRODUCER_SUCCESS = 17
    PING = 18
    PONG = 19
    REDELIVER_UNACKNOWLEDGED_MESSAGES = 20
    PARTITIONED_METADATA = 21
    PARTITIONED_METADATA_RESPONSE = 22
    LOOKUP = 23
    LOOKUP_RESPONSE = 24
    CONSUMER_STATS = 25
    CONSUMER_STATS_RESPONSE = 26
    REACHED_END_OF_TOPIC = 27
    SEEK = 28
    GET_LAST_MESSAGE_ID = 29
    GET_LAST_MESSAGE_ID_RESPONSE = 30
    ACTIVE_CONSUMER_CHANGE = 31
    GET_TOPICS_OF_NAMESPACE = 32
    GET_TOPICS_OF_NAMESPACE_RESPONSE = 33
    GET_SCHEMA = 34
    GET_SCHEMA_RESPONSE = 35
    AUTH_CHALLENGE = 36
    AUTH_RESPONSE = 37
    ACK_RESPONSE = 38
    GET_OR_CREATE_SCHEMA = 39
    GET_OR_CREATE_SCHEMA_RESPONSE = 40
    NEW_TXN = 50
    ADD_PARTITION_TO_TXN = 52
    ADD_SUBSCRIPTION_TO_TXN = 54
    END_TXN = 56
    END_TXN_ON_PARTITION = 58
    END_TXN_ON_SUBSCRIPTION = 60
    TC_CLIENT_CONNECT_REQUEST = 62
    WATCH_TOPIC_LIST = 64
    WATCH_TOPIC_LIST_CLOSE = 67


class ServerError(enum.IntEnum):
    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


class SubType(enum.IntEnum):
    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class AckType(enum.IntEnum):
    Individual = 0
    Cumulative = 1


class CompressionType(enum.IntEnum):
    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


LOOKUP_REDIRECT = 0
LOOKUP_CONNECT = 1
LOOKUP_FAILED = 2
PARTITIONS_SUCCESS = 0
PARTITIONS_FAILED = 1
NO_REQUEST = 2**64 - 1
"""``request_id`` -1 as the uint64 the broker writes for unsolicited ERROR/CLOSE commands."""


class CommandError(ProtobufError):
    """A command that cannot be served as sent; ``request_id`` is set when the request could be named."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


# -- inbound commands ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connect:
    client_version: str
    protocol_version: int
    auth_method_name: str | None
    auth_data: bytes
    proxy_to_broker_url: str | None


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Lookup:
    request_id: int
    topic: str
    authoritative: bool
    listener_name: str | None


@dataclass(frozen=True, slots=True)
class PartitionedMetadata:
    request_id: int
    topic: str


@dataclass(frozen=True, slots=True)
class CreateProducer:
    request_id: int
    producer_id: int
    topic: str
    producer_name: str | None
    epoch: int
    access_mode: int
    schema: WireSchema | None
    topic_epoch: int | None = None
    """The epoch an exclusive producer was given before (a reconnect), as sent: any uint64."""


@dataclass(frozen=True, slots=True)
class Send:
    producer_id: int
    sequence_id: int
    num_messages: int
    highest_sequence_id: int
    is_chunk: bool
    txn: bool
    marker: bool


@dataclass(frozen=True, slots=True)
class Subscribe:
    request_id: int
    consumer_id: int
    topic: str
    subscription: str
    sub_type: SubType
    consumer_name: str
    priority_level: int
    durable: bool
    start_message_id: tuple[int, int, int] | None
    """``(ledgerId, entryId, batchIndex)`` where a reader starts (signed: ``-1:-1`` is the earliest)."""
    initial_earliest: bool
    read_compacted: bool
    force_topic_creation: bool
    key_shared_mode: int | None = None
    """``KeySharedMeta.keySharedMode`` as sent (0 AUTO_SPLIT, 1 STICKY; None without a KeySharedMeta)."""
    hash_ranges: tuple[tuple[int, int], ...] = ()
    """``KeySharedMeta.hashRanges`` as sent (signed; at most :data:`HASH_RANGES_DECODED_MAX`, one more
    stands for "too many"): whether they are valid is the broker core's question."""
    allow_out_of_order: bool = False
    schema: WireSchema | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    consumer_id: int
    permits: int


@dataclass(frozen=True, slots=True)
class AckId:
    ledger_id: int
    entry_id: int
    partition: int
    batch_index: int
    ack_set: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ack:
    consumer_id: int
    ack_type: AckType
    ids: tuple[AckId, ...]
    validation_error: int | None
    request_id: int | None
    txn: bool


@dataclass(frozen=True, slots=True)
class CloseHandle:
    """CLOSE_PRODUCER or CLOSE_CONSUMER from the client."""

    producer: bool
    handle_id: int
    request_id: int


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    consumer_id: int
    request_id: int
    force: bool


@dataclass(frozen=True, slots=True)
class Redeliver:
    consumer_id: int
    ids: tuple[AckId, ...]


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """A client's answer to AUTH_CHALLENGE: its credentials again (``AuthData`` of the response)."""

    auth_method_name: str | None
    auth_data: bytes


@dataclass(frozen=True, slots=True)
class UnsupportedCommand:
    """A command type Magnetar does not serve (yet); answered with an error naming it."""

    type: int
    request_id: int | None

    @property
    def name(self) -> str:
        try:
            return CommandType(self.type).name
        except ValueError:
            return f"command type {self.type}"


Command = (
    Connect
    | Ping
    | Pong
    | Lookup
    | PartitionedMetadata
    | CreateProducer
    | Send
    | Subscribe
    | Flow
    | Ack
    | CloseHandle
    | Unsubscribe
    | Redeliver
    | AuthResponse
    | GetTopics
    | Seek
    | GetLastMessageId
    | GetSchema
    | GetOrCreateSchema
    | UnsupportedCommand
)

_ID_MAX = 2**63 - 1


def _id(fields: Fields, number: int) -> int:
    """A client-chosen id (request, producer, consumer): Java ``long``s, so non-negative ones fit 63 bits."""
    value = fields.required_uint(number)
    if value > _ID_MAX:
        raise ProtobufError(f"{fields.name}: id field {number} = {value} is out of range")
    return value


def _message_id(fields: Fields) -> AckId:
    """A ``MessageIdData``: ledger and entry ids as the Java ``long``s the client meant (``-1`` arrives as
    2^64-1: :func:`.consumer_commands.signed_id`); whether they name a stored message, and whether an
    ``ack_set`` fits the batch it names (its length is bounded by the command's size), is the broker's
    question - an id that does not is ignored, never an error that ends the connection."""
    ledger = signed_id(fields.required_uint(1))
    entry = signed_id(fields.required_uint(2))
    ack_set = fields.repeated_int64(5)
    return AckId(ledger, entry, fields.int32(3, -1), fields.int32(4, -1), tuple(ack_set))


def _request_id_of(sub: Fields, kind: CommandType) -> int | None:
    """Where the request id sits in the commands we refuse (so the refusal can name it)."""
    number = {
        CommandType.SEEK: 2,
        CommandType.GET_LAST_MESSAGE_ID: 2,
        CommandType.CONSUMER_STATS: 1,
        CommandType.NEW_TXN: 1,
        CommandType.ADD_PARTITION_TO_TXN: 1,
        CommandType.ADD_SUBSCRIPTION_TO_TXN: 1,
        CommandType.END_TXN: 1,
        CommandType.END_TXN_ON_PARTITION: 1,
        CommandType.END_TXN_ON_SUBSCRIPTION: 1,
        CommandType.TC_CLIENT_CONNECT_REQUEST: 1,
        CommandType.WATCH_TOPIC_LIST: 1,
    }.get(kind)
    if number is None or not sub.has(number):
        return None
    try:
        return _id(sub, number)
    except ProtobufError:
        return None


def decode_command(data: bytes | memoryview) -> Command:
    """A ``BaseCommand``'s bytes as a command (:class:`ProtobufError` when malformed)."""
    base = parse_message(data, "BaseCommand")
    kind = base.required_uint(1)
    sub = base.message(kind, "command") if 0 < kind < 2**29 else None
    if sub is None:
        if kind in (CommandType.PING, CommandType.PONG):
            return Ping() if kind == CommandType.PING else Pong()
        raise ProtobufError(f"BaseCommand: type {kind} without its command (field {kind})")
    try:
        kind_enum = CommandType(kind)
    except ValueError:
        return UnsupportedCommand(kind, None)
    try:
        return _DECODERS[kind_enum](sub)
    except KeyError:
        return UnsupportedCommand(kind, _request_id_of(sub, kind_enum))


def _connect(f: Fields) -> Connect:
    version = f.uint(4, 0)
    return Connect(
        client_version=f.required_string(1),
        protocol_version=min(version, 2**31 - 1),
        auth_method_name=f.optional_string(5),
        auth_data=f.bytes_(3),
        proxy_to_broker_url=f.optional_string(6),
    )


def _lookup(f: Fields) -> Lookup:
    return Lookup(_id(f, 2), f.required_string(1), f.boolean(3), f.optional_string(7))


def _partitioned(f: Fields) -> PartitionedMetadata:
    return PartitionedMetadata(_id(f, 2), f.required_string(1))


def _producer(f: Fields) -> CreateProducer:
    return CreateProducer(
        request_id=_id(f, 3),
        producer_id=_id(f, 2),
        topic=f.required_string(1),
        producer_name=f.optional_string(4),
        epoch=f.uint(8),
        access_mode=f.uint(10),
        schema=optional_schema(f, 7),
        topic_epoch=f.uint(11) if f.has(11) else None,
    )


def _send(f: Fields) -> Send:
    num = f.int32(3, 1)
    if not 1 <= num <= BATCH_MESSAGES_MAX:
        raise CommandError(f"CommandSend: num_messages {num} out of range")
    sequence_id = f.required_uint(2)
    return Send(
        producer_id=_id(f, 1),
        sequence_id=sequence_id,
        num_messages=num,
        highest_sequence_id=f.uint(6),
        is_chunk=f.boolean(7),
        txn=f.has(4) or f.has(5),
        marker=f.boolean(8),
    )


def _subscribe(f: Fields) -> Subscribe:
    request_id = _id(f, 5)
    try:
        sub_type = SubType(f.required_uint(3))
    except ValueError:
        raise CommandError("CommandSubscribe: unknown subscription type", request_id) from None
    start = f.message(9, "MessageIdData")
    start_id = None
    if start is not None:
        parsed = _message_id(start)
        start_id = (parsed.ledger_id, parsed.entry_id, parsed.batch_index)
    priority = f.int32(7, 0)
    return Subscribe(
        request_id=request_id,
        consumer_id=_id(f, 4),
        topic=f.required_string(1),
        subscription=f.required_string(2),
        sub_type=sub_type,
        consumer_name=f.string(6),
        priority_level=max(0, priority),
        durable=f.boolean(8, True),
        start_message_id=start_id,
        initial_earliest=f.uint(13) == 1,
        read_compacted=f.boolean(11),
        force_topic_creation=f.boolean(15, True),
        **_key_shared_meta(f.message(17, "KeySharedMeta")),
        schema=optional_schema(f, 12),
    )


HASH_RANGES_DECODED_MAX = 65536
"""``IntRange``\\ s of a KeySharedMeta decoded (no more disjoint ranges fit the 65536 slots); one more is kept
so that the broker refuses the list as too long."""


def _key_shared_meta(meta: Fields | None) -> dict[str, Any]:
    """KeySharedMeta: 1 keySharedMode, 3 hashRanges (IntRange: 1 start, 2 end, int32), 4
    allowOutOfOrderDelivery. Values are read as 64-bit so that an out-of-range one is the broker's refusal
    (ConsumerAssignError), not a malformed command."""
    if meta is None:
        return {}
    ranges = tuple(
        (r.int64(1), r.int64(2))
        for r in itertools.islice(meta.repeated_messages(3, "IntRange"), HASH_RANGES_DECODED_MAX + 1)
    )
    return {"key_shared_mode": meta.uint(1), "hash_ranges": ranges, "allow_out_of_order": meta.boolean(4)}


def _flow(f: Fields) -> Flow:
    return Flow(_id(f, 1), f.uint32(2))


def _ack(f: Fields) -> Ack:
    try:
        ack_type = AckType(f.required_uint(2))
    except ValueError:
        raise CommandError("CommandAck: unknown ack type") from None
    ids = tuple(_message_id(m) for m in f.repeated_messages(3, "MessageIdData"))
    request_id = _id(f, 8) if f.has(8) else None
    return Ack(
        consumer_id=_id(f, 1),
        ack_type=ack_type,
        ids=ids,
        validation_error=f.uint(4) if f.has(4) else None,
        request_id=request_id,
        txn=f.has(6) or f.has(7),
    )


def _close_producer(f: Fields) -> CloseHandle:
    return CloseHandle(True, _id(f, 1), _id(f, 2))


def _close_consumer(f: Fields) -> CloseHandle:
    return CloseHandle(False, _id(f, 1), _id(f, 2))


def _unsubscribe(f: Fields) -> Unsubscribe:
    return Unsubscribe(_id(f, 1), _id(f, 2), f.boolean(3))


def _redeliver(f: Fields) -> Redeliver:
    return Redeliver(_id(f, 1), tuple(_message_id(m) for m in f.repeated_messages(2, "MessageIdData")))


def _empty_ping(_: Fields) -> Ping:
    return Ping()


def _empty_pong(_: Fields) -> Pong:
    return Pong()


def _auth_response(f: Fields) -> AuthResponse:
    data = f.message(2, "AuthData")
    if data is None:
        return AuthResponse(None, b"")
    return AuthResponse(data.optional_string(1), data.bytes_(2))


_DECODERS: dict[CommandType, Callable[[Fields], Command]] = {
    CommandType.CONNECT: _connect,
    CommandType.PING: _empty_ping,
    CommandType.PONG: _empty_pong,
    CommandType.LOOKUP: _lookup,
    CommandType.PARTITIONED_METADATA: _partitioned,
    CommandType.PRODUCER: _producer,
    CommandType.SEND: _send,
    CommandType.SUBSCRIBE: _subscribe,
    CommandType.FLOW: _flow,
    CommandType.ACK: _ack,
    CommandType.CLOSE_PRODUCER: _close_producer,
    CommandType.CLOSE_CONSUMER: _close_consumer,
    CommandType.UNSUBSCRIBE: _unsubscribe,
    CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES: _redeliver,
    CommandType.AUTH_RESPONSE: _auth_response,
    CommandType.GET_TOPICS_OF_NAMESPACE: decode_get_topics,
    CommandType.SEEK: decode_seek,
    CommandType.GET_LAST_MESSAGE_ID: decode_get_last_message_id,
    CommandType.GET_SCHEMA: decode_get_schema,
    CommandType.GET_OR_CREATE_SCHEMA: decode_get_or_create_schema,
}
