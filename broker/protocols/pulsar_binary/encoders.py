"""What the broker writes of Pulsar's binary protocol: each command as its ``BaseCommand`` bytes (the frame
around them is :mod:`.framing`). The raw clients of the tests build CONNECT and AUTH_RESPONSE with these too.
The commands the broker reads, their values and enums are :mod:`.commands`."""

from __future__ import annotations

from magnetar.broker.protocols.pulsar_binary.commands import (
    LOOKUP_CONNECT,
    LOOKUP_FAILED,
    LOOKUP_REDIRECT,
    NO_REQUEST,
    PARTITIONS_FAILED,
    PARTITIONS_SUCCESS,
    SERVER_VERSION,
    CommandType,
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import Writer, encode_varint


def _base(kind: CommandType, sub: Writer) -> bytes:
    return Writer().uint(1, kind).data(kind, sub.bytes()).bytes()


def encode_connect(
    client_version: str, protocol_version: int, auth: tuple[str, bytes] | None = None
) -> bytes:
    """CONNECT (what a client sends; the tests' raw client uses it)."""
    w = Writer().string(1, client_version)
    if auth is not None:
        w.data(3, auth[1])
    w.uint(4, protocol_version)
    if auth is not None:
        w.string(5, auth[0])
    return _base(CommandType.CONNECT, w)


def encode_connected(protocol_version: int, max_message_size: int) -> bytes:
    w = Writer().string(1, SERVER_VERSION).uint(2, protocol_version).uint(3, max_message_size)
    return _base(CommandType.CONNECTED, w)


AUTH_REFRESH_DATA = b"PulsarAuthRefresh"
"""What Pulsar's broker puts in an AUTH_CHALLENGE that asks for fresh credentials."""


def encode_auth_challenge(auth_method_name: str, protocol_version: int) -> bytes:
    """AUTH_CHALLENGE: the client answers AUTH_RESPONSE with its current credentials."""
    data = Writer().string(1, auth_method_name).data(2, AUTH_REFRESH_DATA)
    w = Writer().string(1, SERVER_VERSION).data(2, data.bytes()).uint(3, protocol_version)
    return _base(CommandType.AUTH_CHALLENGE, w)


def encode_auth_response(auth_method_name: str, auth_data: bytes, protocol_version: int) -> bytes:
    """AUTH_RESPONSE (what a client sends; the tests' raw client uses it)."""
    data = Writer().string(1, auth_method_name).data(2, auth_data)
    w = Writer().string(1, "raw").data(2, data.bytes()).uint(3, protocol_version)
    return _base(CommandType.AUTH_RESPONSE, w)


def encode_ping() -> bytes:
    return _base(CommandType.PING, Writer())


def encode_pong() -> bytes:
    return _base(CommandType.PONG, Writer())


def encode_error(request_id: int, error: ServerError, message: str) -> bytes:
    w = Writer().uint(1, request_id).uint(2, error).string(3, message)
    return _base(CommandType.ERROR, w)


def encode_success(request_id: int) -> bytes:
    return _base(CommandType.SUCCESS, Writer().uint(1, request_id))


def encode_lookup_response(
    request_id: int,
    *,
    url: str = "",
    url_tls: str = "",
    redirect: bool = False,
    authoritative: bool = True,
    proxy_through_service_url: bool = False,
) -> bytes:
    w = Writer()
    if url:
        w.string(1, url)
    if url_tls:
        w.string(2, url_tls)
    w.uint(3, LOOKUP_REDIRECT if redirect else LOOKUP_CONNECT).uint(4, request_id).boolean(5, authoritative)
    if proxy_through_service_url:
        w.boolean(8, True)
    return _base(CommandType.LOOKUP_RESPONSE, w)


def encode_lookup_failed(request_id: int, error: ServerError, message: str) -> bytes:
    w = Writer().uint(3, LOOKUP_FAILED).uint(4, request_id).uint(6, error).string(7, message)
    return _base(CommandType.LOOKUP_RESPONSE, w)


def encode_partitions(request_id: int, partitions: int) -> bytes:
    w = Writer().uint(1, partitions).uint(2, request_id).uint(3, PARTITIONS_SUCCESS)
    return _base(CommandType.PARTITIONED_METADATA_RESPONSE, w)


def encode_partitions_failed(request_id: int, error: ServerError, message: str) -> bytes:
    w = Writer().uint(2, request_id).uint(3, PARTITIONS_FAILED).uint(4, error).string(5, message)
    return _base(CommandType.PARTITIONED_METADATA_RESPONSE, w)


def encode_producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int,
    *,
    topic_epoch: int | None = None,
    ready: bool = True,
    schema_version: bytes | None = None,
) -> bytes:
    """PRODUCER_SUCCESS; ``ready`` False tells a WaitForExclusive producer it is queued (a second one,
    ready, follows when it gets the topic); ``topic_epoch`` for the exclusive modes; ``schema_version``
    (8 bytes) when the producer named a schema."""
    w = Writer().uint(1, request_id).string(2, producer_name).sint(3, last_sequence_id)
    if schema_version is not None:
        w.data(4, schema_version)
    if topic_epoch is not None:
        w.uint(5, topic_epoch)
    w.boolean(6, ready)
    return _base(CommandType.PRODUCER_SUCCESS, w)


def _message_id_bytes(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1) -> bytes:
    w = Writer().uint(1, ledger_id).uint(2, entry_id)
    if partition >= 0:
        w.sint(3, partition)
    if batch_index >= 0:
        w.sint(4, batch_index)
    return w.bytes()


_RECEIPT_HEAD = encode_varint(1 << 3) + encode_varint(CommandType.SEND_RECEIPT)
_RECEIPT_FIELD = encode_varint(CommandType.SEND_RECEIPT << 3 | 2)


def encode_send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int
) -> bytes:
    """SEND_RECEIPT, its bytes joined directly (one per SEND: a :class:`Writer` per field cost a third of the
    codec's time per message); the same bytes as the generic encoding (a test checks)."""
    message_id = b"\x08" + encode_varint(ledger_id) + b"\x10" + encode_varint(entry_id)
    sub = (
        b"\x08" + encode_varint(producer_id) + b"\x10" + encode_varint(sequence_id)
        + b"\x1a" + encode_varint(len(message_id)) + message_id
        + b"\x20" + encode_varint(highest_sequence_id)
    )  # fmt: skip
    return _RECEIPT_HEAD + _RECEIPT_FIELD + encode_varint(len(sub)) + sub


def encode_send_error(producer_id: int, sequence_id: int, error: ServerError, message: str) -> bytes:
    w = Writer().uint(1, producer_id).uint(2, sequence_id).uint(3, error).string(4, message)
    return _base(CommandType.SEND_ERROR, w)


def encode_message_command(
    consumer_id: int, ledger_id: int, entry_id: int, partition: int, redelivery_count: int
) -> bytes:
    w = Writer().uint(1, consumer_id).data(2, _message_id_bytes(ledger_id, entry_id, partition))
    if redelivery_count > 0:
        w.uint(3, redelivery_count)
    return _base(CommandType.MESSAGE, w)


def encode_ack_response(consumer_id: int, request_id: int) -> bytes:
    return _base(CommandType.ACK_RESPONSE, Writer().uint(1, consumer_id).uint(6, request_id))


def encode_close_producer(producer_id: int) -> bytes:
    return _base(CommandType.CLOSE_PRODUCER, Writer().uint(1, producer_id).uint(2, NO_REQUEST))


def encode_close_consumer(consumer_id: int) -> bytes:
    return _base(CommandType.CLOSE_CONSUMER, Writer().uint(1, consumer_id).uint(2, NO_REQUEST))
