"""The core's side of one binary-protocol connection: outbound frames, deliveries as MESSAGE commands,
SEND payloads as publish requests, and acknowledgements back into positions.

* :class:`Outbound` - the connection's bounded queue of encoded frames, drained by one writer task.
* :class:`ConsumerDeliveries` - one consumer's delivery sink (:class:`~magnetar.broker.core.delivery.
  DeliverySink`). The core hands over messages one by one; consecutive messages of one stored entry that
  the dispatcher hands over in one round become one batch MESSAGE (``num_messages_in_batch`` = how many
  were handed over, counted here, never taken from a client), a message stored alone a plain MESSAGE. A
  client numbers the messages of a batch MESSAGE 0..k-1 and acknowledges the entry once all are acked, so
  each delivered group is remembered (its real batch indexes) until its acknowledgement arrives and
  :mod:`.acks` turns it back into positions. A run of messages stops at the byte bound only between
  entries: the dispatcher hands a binary consumer whole entries, so a client never gets two MESSAGEs of one
  entry at once (it could not tell their messages apart).
* :func:`compact_messages` - a SEND's payload section as compact messages (the entry format of
  :mod:`magnetar.broker.wire.entry_format`), one per message of a client batch, counted from the bytes;
  a compressed payload is decompressed first (:mod:`.compression`).
* :class:`SendCompletion` - a publish request's outcome as SEND_RECEIPT or SEND_ERROR.
"""

from __future__ import annotations

import builtins
import struct
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

import trio

from magnetar.broker.core import Delivery, PublishRequest, Subscriber
from magnetar.broker.protocols.pulsar_binary.acks import DeliveredGroups, apply_acks
from magnetar.broker.protocols.pulsar_binary.commands import (
    AckId,
    CompressionType,
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.compression import DecompressionFailed, decompress
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_message_command,
    encode_send_error,
    encode_send_receipt,
)
from magnetar.broker.protocols.pulsar_binary.framing import (
    CHUNKED_MESSAGE_BYTES_MAX_DEFAULT,
    MAX_MESSAGE_SIZE_DEFAULT,
    PayloadSection,
    encode_frame,
    encode_payload_section,
)
from magnetar.broker.protocols.pulsar_binary.metadata import (
    MessageMetadata,
    SingleMessage,
    decode_batch,
    decode_metadata,
    encode_batch,
    encode_metadata,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import ProtobufError
from magnetar.broker.wire import COMPACT_MESSAGE, COMPACT_NO_KEY, ChunkInfo, StoredMessage, check_chunk

OUTBOUND_BYTES_MAX = 8 * 1024 * 1024
"""Bytes a connection's outbound queue holds before deliveries stop."""
CONSUMER_QUEUE_MESSAGES_MAX = 1000
"""Messages one consumer may have queued for the connection and not yet written."""
_KEY_BYTES_MAX = COMPACT_NO_KEY - 1
_PROPERTY_BYTES_MAX = 0xFFFF
_U16 = struct.Struct("<H")


class SendRefused(Exception):
    """A SEND the broker does not store: the error and message of its SEND_ERROR."""

    def __init__(self, error: ServerError, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class Outbound:
    """A connection's encoded frames waiting to be written (bounded in bytes for deliveries)."""

    def __init__(self, bytes_max: int = OUTBOUND_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._frames: deque[bytes] = deque()
        self._ready = trio.Event()
        self._before_write: list[Callable[[], None]] = []
        self._room_listeners: list[Callable[[], None]] = []
        self.closed = False

    def push(self, frame: bytes) -> None:
        if self.closed:
            return
        self._frames.append(frame)
        self.bytes += len(frame)
        self._ready.set()

    def wake(self) -> None:
        self._ready.set()

    def before_write(self, hook: Callable[[], None]) -> None:
        """``hook`` runs each time the writer wakes, before it writes (consumers close their groups)."""
        self._before_write.append(hook)

    def add_room_listener(self, listener: Callable[[], None]) -> None:
        self._room_listeners.append(listener)

    def remove_hooks(self, hook: Callable[[], None], listener: Callable[[], None]) -> None:
        """Undo :meth:`before_write` and :meth:`add_room_listener` (a consumer closed)."""
        if hook in self._before_write:
            self._before_write.remove(hook)
        if listener in self._room_listeners:
            self._room_listeners.remove(listener)

    async def take(self) -> list[bytes]:
        """Every frame queued (waits for one)."""
        while True:
            for hook in self._before_write:
                hook()
            if self._frames:
                frames = list(self._frames)
                self._frames.clear()
                return frames
            self._ready = trio.Event()
            await self._ready.wait()

    def written(self, count: int) -> None:
        was_full = self.bytes >= self.bytes_max
        self.bytes = max(0, self.bytes - count)
        if was_full and self.bytes < self.bytes_max:
            for listener in self._room_listeners:
                listener()


class _Group:
    __slots__ = ("deliveries", "entry", "partition", "redelivery_count")

    def __init__(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        self.entry = (delivery.ledger_id, delivery.entry_id)
        self.deliveries = [delivery]
        self.partition = partition
        self.redelivery_count = redelivery_count


class ConsumerDeliveries:
    """One consumer's delivery sink (see the module docstring)."""

    def __init__(self, consumer_id: int, outbound: Outbound, queue_max: int = CONSUMER_QUEUE_MESSAGES_MAX):
        self.consumer_id = consumer_id
        self._outbound = outbound
        self.bytes_max = outbound.bytes_max
        self._queue_max = queue_max
        self._open: _Group | None = None
        self._listeners: list[Callable[[], None]] = []
        self.delivered = DeliveredGroups()
        """The batch indexes of the last batch MESSAGE of each entry not acknowledged yet (:mod:`.acks`)."""
        outbound.before_write(self.flush)
        outbound.add_room_listener(self._on_room)

    @property
    def bytes(self) -> int:
        """The connection's queued bytes (the core reads them per message)."""
        return self._outbound.bytes

    def room(self) -> int:
        queued = len(self._open.deliveries) if self._open is not None else 0
        if self._outbound.bytes >= self.bytes_max:
            return 0
        return max(0, self._queue_max - queued)

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _on_room(self) -> None:
        for listener in self._listeners:
            listener()

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        group = self._open
        if delivery.batch_index < 0 or delivery.batch_size == 1:  # stored alone: a plain MESSAGE
            self.flush()
            self._outbound.push(self._single(delivery, partition, redelivery_count))
            if delivery.batch_index >= 0:  # an entry of one message: its ack (no batch index) names it
                self.delivered.sent((delivery.ledger_id, delivery.entry_id), [delivery.batch_index])
            return
        if group is not None and group.entry == (delivery.ledger_id, delivery.entry_id):
            group.deliveries.append(delivery)
            group.redelivery_count = max(group.redelivery_count, redelivery_count)
            return
        self.flush()
        self._open = _Group(delivery, partition, redelivery_count)
        self._outbound.wake()

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        # Messages of one entry gather into one batch MESSAGE as they arrive; the run stops at the byte bound
        # only between entries (an entry goes whole: :mod:`.acks`).
        taken = 0
        last = len(deliveries) - 1
        outbound = self._outbound
        for delivery in deliveries:
            self.deliver(
                delivery, partition, redelivery_counts[taken] if redelivery_counts is not None else 0
            )
            if outbound.bytes >= self.bytes_max and taken < last:
                following = deliveries[taken + 1]
                if following.entry_id != delivery.entry_id or following.ledger_id != delivery.ledger_id:
                    return taken + 1
            taken += 1
        return taken

    def flush(self) -> None:
        """Send the open group as one batch MESSAGE."""
        group = self._open
        if group is None:
            return
        self._open = None
        first_delivery = group.deliveries[0]
        first = first_delivery.message
        singles = [_single_message(d.message) for d in group.deliveries]
        meta = MessageMetadata(
            first.producer_name,
            first.sequence_id,
            first.publish_time_ms,
            num_messages_in_batch=len(singles),
            deliver_at_time_ms=first_delivery.deliver_at_ms or None,  # one entry: one time
            schema_version=first.schema_version,
        )
        ledger_id, entry_id = group.entry
        command = encode_message_command(
            self.consumer_id, ledger_id, entry_id, group.partition, group.redelivery_count
        )
        payload = encode_batch(singles)
        self.delivered.sent(group.entry, [d.batch_index for d in group.deliveries])
        self._outbound.push(encode_frame(command, encode_payload_section(encode_metadata(meta), payload)))

    def _single(self, delivery: Delivery, partition: int, redelivery_count: int) -> builtins.bytes:
        message = delivery.message
        meta = MessageMetadata(
            message.producer_name,
            message.sequence_id,
            message.publish_time_ms,
            dict(message.properties),
            message.key,
            message.event_time_ms,
            deliver_at_time_ms=delivery.deliver_at_ms or None,
            chunk=message.chunk,
            schema_version=message.schema_version,
        )
        command = encode_message_command(
            self.consumer_id, delivery.ledger_id, delivery.entry_id, partition, redelivery_count
        )
        return encode_frame(command, encode_payload_section(encode_metadata(meta), message.payload))

    def ack(self, subscriber: Subscriber, message_ids: Sequence[AckId], *, cumulative: bool) -> None:
        """The client acknowledged ``message_ids`` (one ACK: :func:`.acks.apply_acks`)."""
        apply_acks(self.delivered, subscriber, message_ids, cumulative=cumulative)

    def close(self) -> None:
        """The consumer closed: what it was not sent yet went back to its subscription, nothing more is sent
        for it, and the connection forgets it."""
        self._open = None
        self.delivered.forget()
        self._outbound.remove_hooks(self.flush, self._on_room)

    def redelivering(self, entries: Collection[tuple[int, int]] | None) -> None:
        """``entries`` (all when None) go back for redelivery: what was dispatched goes out first (the
        client's permits paid for it), then their batch MESSAGEs are forgotten."""
        self.flush()
        self.delivered.forget(entries)


def _single_message(message: StoredMessage) -> SingleMessage:
    return SingleMessage(message.payload, dict(message.properties), message.key, message.event_time_ms)


def _compact(payload: bytes, key: str | None, properties: Mapping[str, str], event_time_ms: int) -> bytes:
    parts: list[bytes] = []
    key_bytes = b""
    key_len = COMPACT_NO_KEY
    if key is not None:
        key_bytes = key.encode("utf-8")
        if len(key_bytes) > _KEY_BYTES_MAX:
            raise SendRefused(ServerError.NotAllowedError, f"key of {len(key_bytes)} bytes is too long")
        key_len = len(key_bytes)
    for name, value in properties.items():
        for text in (name, value):
            data = text.encode("utf-8")
            if len(data) > _PROPERTY_BYTES_MAX:
                raise SendRefused(ServerError.NotAllowedError, f"property of {len(data)} bytes is too long")
            parts.append(_U16.pack(len(data)))
            parts.append(data)
    if not 0 <= event_time_ms < 2**63:
        raise SendRefused(ServerError.NotAllowedError, f"event time {event_time_ms} out of range")
    head = COMPACT_MESSAGE.pack(len(payload), key_len, len(properties), event_time_ms)
    return b"".join((head, key_bytes, *parts, payload))


class CompactSend(NamedTuple):
    """A SEND's messages as the broker stores them (:func:`compact_messages`)."""

    body: bytes
    """Compact messages."""
    messages: int
    payload_bytes: int
    deliver_at_ms: int
    """The metadata's ``deliver_at_time``; 0 when it has none."""
    chunk: ChunkInfo | None
    """Checked chunk fields when the SEND is one chunk of a larger message."""


def compact_messages(
    section: PayloadSection,
    message_size_max: int = MAX_MESSAGE_SIZE_DEFAULT,
    chunked_message_bytes_max: int = CHUNKED_MESSAGE_BYTES_MAX_DEFAULT,
) -> CompactSend:
    """A SEND's messages as compact messages. A compressed payload is decompressed first (bounded by
    ``message_size_max``: :mod:`.compression`) and stored uncompressed. A chunk (the metadata has a chunk
    field) must be one uncompressed, unbatched message whose chunk fields agree (:func:`check_chunk`, the
    whole message at most ``chunked_message_bytes_max`` bytes). Refuses what Magnetar does not store (a
    payload that does not decompress as its metadata says, a compressed chunk, encryption) with
    :class:`SendRefused`."""
    if not section.checksum_ok:
        raise SendRefused(ServerError.ChecksumError, "Checksum failed on the broker")
    try:
        meta = decode_metadata(section.metadata)
    except ProtobufError as exc:
        raise SendRefused(ServerError.MetadataError, f"Invalid message metadata: {exc}") from None
    if meta.encrypted:
        raise SendRefused(ServerError.NotAllowedError, "encrypted messages are not supported by Magnetar yet")
    deliver_at = meta.deliver_at_time_ms or 0
    payload = section.payload
    if meta.chunk is not None:
        _check_chunk(meta, len(payload), chunked_message_bytes_max)
    if meta.compression != CompressionType.NONE:
        try:
            payload = decompress(meta.compression, payload, meta.uncompressed_size, message_size_max)
        except DecompressionFailed as exc:
            error = ServerError.NotAllowedError if exc.unknown_codec else ServerError.MetadataError
            raise SendRefused(error, f"Invalid compressed payload: {exc}") from None
    if meta.num_messages_in_batch is None:
        body = _compact(payload, meta.partition_key, meta.properties, meta.event_time_ms)
        return CompactSend(body, 1, len(payload), deliver_at, meta.chunk)
    try:
        messages = decode_batch(payload, meta.num_messages_in_batch)
    except ProtobufError as exc:
        raise SendRefused(ServerError.MetadataError, f"Invalid batch: {exc}") from None
    bodies = [_compact(m.payload, m.partition_key, m.properties, m.event_time_ms) for m in messages]
    payload_bytes = sum(len(m.payload) for m in messages)
    return CompactSend(b"".join(bodies), len(messages), payload_bytes, deliver_at, None)


def _check_chunk(meta: MessageMetadata, payload_bytes: int, total_max: int) -> None:
    """A chunk's metadata as Magnetar stores it, or :class:`SendRefused` naming what is wrong."""
    assert meta.chunk is not None
    if meta.num_messages_in_batch is not None:
        raise SendRefused(ServerError.MetadataError, "Invalid chunk: a chunk cannot be a batch")
    if meta.compression != CompressionType.NONE:
        raise SendRefused(
            ServerError.NotAllowedError, "compressed chunked messages are not supported by Magnetar yet"
        )
    fault = check_chunk(meta.chunk, payload_bytes, total_max)
    if fault is not None:
        raise SendRefused(ServerError.MetadataError, f"Invalid chunk: {fault}")


class SendCompletion:
    """A SEND's publish request answered as SEND_RECEIPT or SEND_ERROR; the request's tag is
    ``(producer_id, sequence_id, highest_sequence_id)``."""

    __slots__ = ("_outbound",)

    def __init__(self, outbound: Outbound) -> None:
        self._outbound = outbound

    def stored(
        self,
        request: PublishRequest,
        partition: int,
        ledger_id: int,
        entry_id: int,
        first_index: int,
        batch_size: int,
    ) -> None:
        producer_id, sequence_id, highest = _tag(request)
        if ledger_id < 0:  # a duplicate (deduplication): Pulsar's -1:-1, its uint64 fields' two's complement
            ledger_id, entry_id = _U64_MINUS_ONE, _U64_MINUS_ONE
        self._outbound.push(
            encode_frame(encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest))
        )

    def failed(self, request: PublishRequest, reason: str) -> None:
        producer_id, sequence_id, _ = _tag(request)
        error = ServerError.PersistenceError
        self._outbound.push(encode_frame(encode_send_error(producer_id, sequence_id, error, reason)))


_U64_MINUS_ONE = 2**64 - 1


def _tag(request: PublishRequest) -> tuple[int, int, int]:
    tag = request.tag
    assert isinstance(tag, tuple)
    return tag
