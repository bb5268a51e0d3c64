"""The binary front door's consumer commands that move or query a subscription rather than a message:
REDELIVER_UNACKNOWLEDGED_MESSAGES, GET_LAST_MESSAGE_ID and SEEK (:mod:`.binary_door` hands them here).

* REDELIVER_UNACKNOWLEDGED_MESSAGES - as Pulsar's broker: on a Shared or Key_Shared subscription with message
  ids, the messages of those entries still held by this consumer (ids of other consumers' messages, of
  acknowledged or unknown messages are ignored); otherwise every message the consumer holds. They go back to
  the dispatcher with their redelivery count + 1 (kept by the core:
  :meth:`~magnetar.broker.core.Subscriber.redeliver_unacked`); the command has no answer.
* GET_LAST_MESSAGE_ID - the topic's last stored message (its batch index when the last entry is a batch;
  an empty topic answers its current ledger with entry -1, as Pulsar's broker) and the subscription's
  mark-delete position (a reader's non-durable one too).
* a SUBSCRIBE of a non-durable subscription with a start message id (a reader) starts after that id
  (:func:`reader`), unless its subscription is still there (a seek keeps it for its clients' return);
* SEEK - to a message id (``-1:-1`` is the earliest, ``Long.MAX_VALUE`` the latest; an id past the end
  means the end) or to a publish time: the core resets the subscription's cursor and disconnects its
  consumers (CLOSE_CONSUMER), then SUCCESS, as Pulsar does; the clients subscribe again and read from there.

Unknown consumers are answered ``ERROR MetadataError "Consumer not found"`` (REDELIVER has no request id: it
is ignored), a SEEK with neither an id nor a time ``ERROR MetadataError``, a forged id (a negative ledger
other than -1:-1, an entry below -1) ``ERROR MetadataError`` naming it, a refusal of the core its kind's
error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from magnetar.broker.core import (
    Consumer,
    NonPersistentTopic,
    PersistentTopic,
    ServiceError,
    Subscriber,
    SubscriptionType,
)
from magnetar.broker.protocols.pulsar_binary.commands import (
    Redeliver,
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.consumer_commands import (
    ID_LATEST,
    GetLastMessageId,
    Seek,
    encode_get_last_message_id_response,
)
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_error,
    encode_success,
)
from magnetar.broker.protocols.pulsar_binary.errors import server_error_of
from magnetar.broker.wire import EARLIEST, LATEST, MessageId

log = logging.getLogger(__name__)

_INDIVIDUAL_ACK_TYPES = (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)
REDELIVER_IDS_MAX = 10_000
"""Message ids one REDELIVER may name (more: the consumer's every unacknowledged message is redelivered)."""


class Sink(Protocol):
    def redelivering(self, entries: list[tuple[int, int]] | None) -> None: ...


class Handle(Protocol):
    @property
    def subscriber(self) -> Subscriber: ...

    @property
    def sink(self) -> Sink: ...

    @property
    def sub_type(self) -> SubscriptionType: ...


Send = Callable[[bytes], None]


def redeliver(consumers: Mapping[int, Handle], command: Redeliver) -> None:
    handle = consumers.get(command.consumer_id)
    if handle is None:
        return
    entries: list[tuple[int, int]] | None = None
    if command.ids and handle.sub_type in _INDIVIDUAL_ACK_TYPES and len(command.ids) <= REDELIVER_IDS_MAX:
        entries = sorted({(m.ledger_id, m.entry_id) for m in command.ids})
    handle.sink.redelivering(entries)
    count = handle.subscriber.redeliver_unacked(entries)
    log.debug("consumer %s: %d messages redelivered", command.consumer_id, count)


async def get_last_message_id(consumers: Mapping[int, Handle], command: GetLastMessageId, send: Send) -> None:
    handle = consumers.get(command.consumer_id)
    if handle is None:
        send(encode_error(command.request_id, ServerError.MetadataError, "Consumer not found"))
        return
    subscriber = handle.subscriber
    try:
        last, batch_index, mark_delete = await subscriber.last_message()
    except ServiceError as exc:
        send(encode_error(command.request_id, server_error_of(exc), str(exc)))
        return
    send(
        encode_get_last_message_id_response(
            command.request_id,
            last,
            subscriber.partition,
            batch_index,
            mark_delete,
        )
    )


def _seek_position(message_id: tuple[int, int]) -> tuple[int, int] | None:
    """The position a SEEK's id names (None: a forged id)."""
    ledger_id, entry_id = message_id
    if ledger_id == -1 and entry_id == -1:
        return (-1, -1)  # the earliest: the cursor goes to the first stored entry
    if ID_LATEST in (ledger_id, entry_id):
        return (ID_LATEST, 0)  # past the end: clamped to the next message's slot
    if ledger_id < 0 or entry_id < -1:
        return None
    return (ledger_id, entry_id)  # entry -1: the start of that ledger (the last id of an empty topic)


async def seek(consumers: Mapping[int, Handle], command: Seek, send: Send) -> None:
    handle = consumers.get(command.consumer_id)
    if handle is None:
        send(encode_error(command.request_id, ServerError.MetadataError, "Consumer not found"))
        return
    if command.message_id is None and command.publish_time_ms is None:
        send(
            encode_error(
                command.request_id,
                ServerError.MetadataError,
                "Message id and message publish time were not present",
            )
        )
        return
    try:
        if command.message_id is not None:
            position = _seek_position(command.message_id)
            if position is None:
                ledger_id, entry_id = command.message_id
                send(
                    encode_error(
                        command.request_id,
                        ServerError.MetadataError,
                        f"Invalid message id {ledger_id}:{entry_id} to seek to",
                    )
                )
                return
            await handle.subscriber.seek(position)
        else:
            await handle.subscriber.seek(publish_time_ms=command.publish_time_ms)
    except ServiceError as exc:
        send(encode_error(command.request_id, server_error_of(exc), str(exc)))
        return
    send(encode_success(command.request_id))


async def reader(
    topic: PersistentTopic | NonPersistentTopic,
    name: str,
    start: tuple[int, int, int],
    make_consumer: Callable[[], Consumer],
) -> Subscriber:
    """A non-durable subscription ``name`` that starts after ``start`` (a SUBSCRIBE's ``start_message_id``:
    what a reader asks for): ``-1:-1`` the earliest, ``Long.MAX_VALUE`` the latest, else the messages after
    that id - for a message of a batch entry, that whole entry, as Pulsar delivers it: the client numbers
    the batch's messages itself and drops those before its start (and the start itself unless its reader is
    inclusive). A subscription of that name that is still there - a
    reader coming back after its seek - is joined as it is, as Pulsar does."""
    if isinstance(topic, PersistentTopic) and name in topic.subscriptions:
        return await topic.subscribe(
            name, make_consumer, SubscriptionType.EXCLUSIVE, durable=False, start_earliest=False
        )
    ledger_id, entry_id, batch_index = start
    if ID_LATEST in (ledger_id, entry_id):
        message_id = LATEST
    elif ledger_id < 0 or entry_id < 0:
        message_id = EARLIEST
    elif batch_index >= 0:  # the whole batch entry, numbered as stored: the client drops what precedes
        message_id = MessageId(ledger_id, entry_id - 1, -1, -1)
    else:
        message_id = MessageId(ledger_id, entry_id, -1, -1)
    if isinstance(topic, PersistentTopic):
        return topic.create_reader(message_id, make_consumer, name)
    return topic.create_reader(message_id, make_consumer)
