"""The publish path's vocabulary: a publish request, where its outcome goes, and how requests share an entry.

Whatever protocol a message came in, the topic sees a :class:`PublishRequest`: one or more messages of one
producer, with their payload bytes, their content as an entry will hold it, and one
:class:`PublishCompletion` that is told, once, where they were stored - ``(partition, ledger, entry,
first_index, batch_size)``, message ``i`` of the request being at ``first_index + i`` (``first_index`` -1 and
``batch_size`` 0 for a message stored alone) - or why they failed. A protocol adapter implements the
completion: a Pulsar JSON ``ProducerAck`` per message, one ``magnetar.v1`` RECEIPT per SEND frame.

The request's :class:`EntryLayout` is its *group key*: consecutive requests with the same layout object may
share an entry, and the layout lays them out (:mod:`.publish_queue` holds the grouping rule). Two layouts
exist, one per entry format of :mod:`magnetar.broker.wire.entry_format`:

* :data:`MESSAGES` - one message per request, given as its fields (payload, key, properties, event time: a
  parsed Pulsar publish request has them); requests of *any* producers share an entry, each message keeping
  its producer's name, sequence id and publish time: a message alone is a ``kind = 1`` entry, several a
  ``kind = 2`` batch;
* :class:`CompactLayout` - one per producer: requests hold messages already laid out as compact messages (a
  ``magnetar.v1`` SEND frame's bytes, validated), and consecutive requests of that producer share one
  ``kind = 3`` entry, stored as they arrived, with consecutive sequence ids and the publish time of the write.

A message to be delivered no earlier than a given time (Pulsar's ``deliverAt``/``deliverAfter``) is laid out
by a :class:`DelayedLayout` made for its request alone: it never shares an entry (the delay is the entry's, as
in Pulsar, where a client never batches a delayed message), and its entry carries the deliver-at time
(:mod:`magnetar.broker.wire.entry_format`). The subscriptions then hold it back (:mod:`.delayed_tracker`).

A new protocol whose messages fit neither brings its own layout (and entry format); nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

from magnetar.broker.wire import ChunkInfo, MessageFields, encode_compact_batch, encode_entry


class RequestOwner(Protocol):
    """A request's producer, as the publish queue sees it (:class:`~.producer.Producer`): it answers the
    request, keeping its requests in order."""

    @property
    def name(self) -> str: ...

    @property
    def schema_version(self) -> int:
        """The version of the producer's schema, written into its compact entries (-1: none)."""
        ...

    def on_stored(
        self, request: PublishRequest, ledger_id: int, entry_id: int, first_index: int, batch_size: int
    ) -> None: ...

    def on_failed(self, request: PublishRequest, reason: str) -> None: ...


class PublishCompletion(Protocol):
    """Where the outcome of a publish request goes (a protocol adapter's answer to its client)."""

    def stored(
        self,
        request: PublishRequest,
        partition: int,
        ledger_id: int,
        entry_id: int,
        first_index: int,
        batch_size: int,
    ) -> None:
        """``request``'s messages are stored in entry ``(ledger_id, entry_id)`` of ``partition`` (-1 for a
        non-partitioned topic), from batch index ``first_index`` on (-1 when stored alone, with
        ``batch_size`` 0)."""
        ...

    def failed(self, request: PublishRequest, reason: str) -> None:
        """``request`` failed (it may or may not have been stored if its write failed; it was not when it
        was refused before it was written)."""
        ...


class EntryLayout(Protocol):
    """A group key that lays out the requests sharing an entry (see the module docstring)."""

    @property
    def alone(self) -> bool:
        """Each request is an entry of its own, never grouped with the next (the client numbered its messages
        from 0: a Pulsar binary SEND), so the publish queue writes it at once."""
        ...

    def encode(
        self, group: Sequence[PublishRequest], messages: int, publish_time_ms: int
    ) -> tuple[bytes, bool]:
        """The entry holding ``group`` (``messages`` messages in all) written at ``publish_time_ms``, and
        whether it is a batch (its messages addressed by batch index) or one message alone."""
        ...


class PublishRequest:
    """Messages of one producer, published together and answered together (see the module docstring).

    A plain slotted class: one is built for every message published over Pulsar's JSON API."""

    __slots__ = (
        "completion",
        "content",
        "failed",
        "highest_sequence_id",
        "layout",
        "messages",
        "payload_bytes",
        "producer",
        "publish_time_ms",
        "received_at",
        "sequence_id",
        "tag",
    )
    highest_sequence_id: int
    """The request's last sequence id: set only on a deduplicated topic (see the end of ``__init__``)."""

    def __init__(
        self,
        producer: RequestOwner,
        layout: EntryLayout,
        content: object,
        messages: int,
        payload_bytes: int,
        sequence_id: int,
        publish_time_ms: int,
        completion: PublishCompletion,
        tag: object,
        received_at: float,
    ) -> None:
        self.producer = producer
        self.layout = layout
        self.content = content
        """What ``layout`` stores: a message's fields (:data:`MESSAGES`), compact messages' bytes."""
        self.messages = messages
        self.payload_bytes = payload_bytes
        self.sequence_id = sequence_id
        """The sequence id of the first message (the next ones follow)."""
        self.publish_time_ms = publish_time_ms
        self.completion = completion
        self.tag = tag
        """The adapter's own: what it needs to answer this request (a JSON context, a receipt slot)."""
        self.received_at = received_at
        """``trio.current_time()`` when the broker received it (publish latency)."""
        self.failed = False
        # ``highest_sequence_id`` (the last sequence id of the request) is set only on a deduplicated topic
        # (:mod:`.dedup`), keeping the constructor as cheap as it was.


class _HeldLayout:
    """:data:`HELD`."""

    __slots__ = ()
    alone = False

    def encode(
        self, group: Sequence[PublishRequest], messages: int, publish_time_ms: int
    ) -> tuple[bytes, bool]:
        raise AssertionError("a held duplicate is never written")


HELD: EntryLayout = _HeldLayout()
"""The layout of a duplicate waiting in its producer's queue for the requests before it (:mod:`.dedup`): it
is never written, and is answered as a duplicate once they are."""


class _MessagesLayout:
    """:data:`MESSAGES`."""

    __slots__ = ()
    alone = False

    def encode(
        self, group: Sequence[PublishRequest], messages: int, publish_time_ms: int
    ) -> tuple[bytes, bool]:
        fields = cast("list[MessageFields]", [request.content for request in group])
        names = [request.producer.name for request in group]
        sequence_ids = [request.sequence_id for request in group]
        times = [request.publish_time_ms for request in group]
        batched = len(group) > 1
        return encode_entry(fields, names, sequence_ids, times, batched=batched), batched


MESSAGES: EntryLayout = _MessagesLayout()
"""One message per request, given as its :class:`~magnetar.broker.wire.entry_format.MessageFields`; any
producers share an entry (``kind = 1`` alone, ``kind = 2`` batched)."""


class CompactLayout:
    """One producer's compact messages (``kind = 3``): each producer has its own, so only its requests share
    an entry."""

    __slots__ = ()
    alone = False

    def encode(
        self, group: Sequence[PublishRequest], messages: int, publish_time_ms: int
    ) -> tuple[bytes, bool]:
        first = group[0]
        bodies = cast("list[bytes | memoryview]", [request.content for request in group])
        data = encode_compact_batch(
            first.producer.name,
            first.sequence_id,
            publish_time_ms,
            messages,
            bodies,
            schema_version=first.producer.schema_version,
        )
        return data, True


class _CompactAlone(CompactLayout):
    """:data:`COMPACT_ALONE`."""

    __slots__ = ()
    alone = True


class DelayedLayout:
    """A delayed request's own layout, or a chunk's: its entry holds it alone, with its deliver-at time (0:
    none) and its chunk head (a chunk of a larger message, compact content only); ``compact`` says whether
    its content is compact messages (a binary SEND, ``kind = 3``) or one message's fields (``kind = 1``)."""

    __slots__ = ("chunk", "compact", "deliver_at_ms")
    alone = True

    def __init__(self, deliver_at_ms: int, *, compact: bool, chunk: ChunkInfo | None = None) -> None:
        self.deliver_at_ms = deliver_at_ms
        """Epoch milliseconds, > 0; 0 for a chunk without delay."""
        self.compact = compact
        self.chunk = chunk

    def encode(
        self, group: Sequence[PublishRequest], messages: int, publish_time_ms: int
    ) -> tuple[bytes, bool]:
        (request,) = group
        if self.compact:
            body = cast("bytes | memoryview", request.content)
            name = request.producer.name
            data = encode_compact_batch(
                name,
                request.sequence_id,
                publish_time_ms,
                messages,
                (body,),
                self.deliver_at_ms,
                chunk=self.chunk,
                schema_version=request.producer.schema_version,
            )
            return data, True
        fields = cast("MessageFields", request.content)
        data = encode_entry(
            (fields,),
            (request.producer.name,),
            (request.sequence_id,),
            (request.publish_time_ms,),
            batched=False,
            deliver_at_ms=self.deliver_at_ms,
        )
        return data, False


COMPACT_ALONE: EntryLayout = _CompactAlone()
"""Compact messages, each request an entry of its own (``kind = 3``): a Pulsar binary SEND, whose messages
the client numbered from 0 in its receipt's entry. Written at once, pipelined with the entries in flight:
the client batched already, and the bookies' journal group-commits the entries in flight together."""
