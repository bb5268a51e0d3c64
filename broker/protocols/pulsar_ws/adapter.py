"""Pulsar's WebSocket JSON API as a protocol adapter (:mod:`magnetar.broker.protocols.adapter`): text frames
carrying Pulsar's JSON requests, answered with Pulsar's JSON acknowledgements and messages.

Runtime errors follow Pulsar: a producer's bad request gets a ``send-error:N`` ack and the session goes on; a
consumer's or reader's frame that is not a JSON command closes the session with Pulsar's code 3, sent as
**4003** (see :mod:`magnetar.broker.protocols.ws_errors`). A binary frame is treated as a request that
cannot be read: ``send-error:3`` for a producer, close 4003 for a consumer or reader. ``unsubscribe`` closes
the session with 1000 once done. The common consumer frame, a plain ack, is applied without JSON parsing
(:func:`~.messages.plain_ack_fields`), and the acks a client sent together as one group
(:class:`JsonConsumerCommands`).

Theory of operation of the producer. Pulsar's JSON API carries one message per frame, so the producer works
per read: the front door hands it every frame one socket read completed, and it goes over them once. The
frames are parsed together (:func:`~.messages.parse_publish_batch`), the arrival time is read once, and
each request becomes one publish of the core in frame order. What must hold per message still holds per
message - a request waits for room among the session's pending messages (``maxPendingMessages``), and the
read stops while answers fill the outbound queue (the client is not reading) - but each is a comparison
unless it has to wait. The refusal (publish rate limits, backlog quotas) is asked per message only while
``unrestricted`` says one could apply; the answer cannot change without an await, so it is looked at again
after every wait. Errors are answered in frame order, as if each frame had come alone. Receipts come back
through :class:`~.session_io.JsonAcks`, one template per message with the id bytes shared per entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from magnetar.bookkeeper.runtime.http import CLOSE_NORMAL
from magnetar.broker.core import (
    MESSAGES,
    DeliveryDelayTooLongError,
    PartitionRouter,
    Producer,
    ServiceError,
)
from magnetar.broker.protocols.adapter import ConsumerSession, FrameHandler, FramesHandler, ProducerSession
from magnetar.broker.protocols.fan import Fan
from magnetar.broker.protocols.outbound import OutboundFrames
from magnetar.broker.protocols.pulsar_ws.fan import JsonConsumerFan, JsonProducerFan
from magnetar.broker.protocols.pulsar_ws.messages import (
    CommandType,
    PublishError,
    PublishRequest,
    end_of_topic_json,
    parse_consumer_command,
    parse_publish_batch,
    parse_reader_command,
    plain_ack_fields,
    plain_acks,
    producer_ack_error,
)
from magnetar.broker.protocols.pulsar_ws.relay_tracking import JsonConsumerTracker, JsonProducerTracker
from magnetar.broker.protocols.pulsar_ws.session_io import JsonAcks, JsonFrames
from magnetar.broker.protocols.relay_tracking import Tracker
from magnetar.broker.protocols.ws_errors import WsErrorCode, WsSessionError

PARSED_FRAMES_MAX = 256
"""Frames of a read a JSON producer parses at a time: what it holds parsed while it waits (for room among
pending messages, for a client that does not read its answers) stays small whatever the read held."""


def _publish_delayed(
    producer: Producer, publish: PublishRequest, acks: JsonAcks, frames: OutboundFrames, now: float
) -> None:
    """A request with ``deliverAt`` / ``deliverAfterMs`` (Pulsar's WebSocket producer applies each when above
    0, ``deliverAfterMs`` last); a delay beyond the topic's maximum is answered as Pulsar's WebSocket producer
    answers a failed send."""
    try:
        producer.publish_delayed(
            MESSAGES,
            publish,
            1,
            len(publish.payload),
            acks,
            publish.context,
            now,
            deliver_at_ms=publish.deliver_at_ms,
            deliver_after_ms=publish.deliver_after_ms,
            sequence_id=publish.sequence_id,
        )
    except DeliveryDelayTooLongError as exc:
        frames.push(producer_ack_error(WsErrorCode.UNKNOWN_ERROR, str(exc), publish.context))


class PulsarWsAdapter:
    """Pulsar's JSON API: the adapter of a client that offers no registered subprotocol."""

    subprotocol: str | None = None

    def outbound(self, *, bytes_max: int, messages_max: int) -> OutboundFrames:
        return JsonFrames(bytes_max=bytes_max, messages_max=messages_max)

    def producer(self, session: ProducerSession) -> FramesHandler:
        """One publish request per text frame, its message given as its fields
        (:data:`~magnetar.broker.core.publish.MESSAGES`), answered by :class:`JsonAcks`.

        The frames of one read are handled in one pass: parsed together (:func:`parse_publish_batch`), the
        time of their arrival read once, and the refusal (rate limits, backlog quotas) asked only while
        ``unrestricted`` says it could refuse; what is checked per message is whether the session has room
        for one more pending message and its outbound queue for more answers. Each check that awaits is
        followed by a fresh look at the time and at ``unrestricted`` (other tasks ran meanwhile)."""
        frames = session.frames
        refusal = session.refusal
        unrestricted = session.unrestricted
        capacity = session.capacity
        publisher = session.publisher
        acks = JsonAcks(frames)
        router = publisher if isinstance(publisher, PartitionRouter) else None
        current_time = trio.current_time

        async def on_frames(batch: Sequence[str | bytes]) -> None:
            free = unrestricted()
            now = current_time()
            for start in range(0, len(batch), PARSED_FRAMES_MAX):
                for publish in parse_publish_batch(batch[start : start + PARSED_FRAMES_MAX]):
                    if isinstance(publish, PublishError):
                        frames.push(publish.ack_json())
                    else:
                        refused = None
                        if not free:
                            refused = await refusal(1)
                            free, now = unrestricted(), current_time()
                        if refused is not None:
                            code = WsErrorCode.UNKNOWN_ERROR
                            frames.push(producer_ack_error(code, refused, publish.context))
                        else:
                            if capacity.count >= capacity.limit:
                                await capacity.wait()
                                free, now = unrestricted(), current_time()
                            producer = publisher if router is None else router.route(publish.key)
                            assert isinstance(producer, Producer)
                            size = len(publish.payload)
                            if publish.deliver_at_ms or publish.deliver_after_ms:
                                _publish_delayed(producer, publish, acks, frames, now)
                            else:
                                producer.publish(
                                    MESSAGES,
                                    publish,
                                    1,
                                    size,
                                    acks,
                                    publish.context,
                                    now,
                                    publish.sequence_id,
                                )
                    if frames.full:
                        await frames.wait_for_room()
                        free, now = unrestricted(), current_time()

        return on_frames

    def consumer(self, session: ConsumerSession) -> FrameHandler:
        """Acks, negative acks, permits, the end-of-topic query and ``unsubscribe``."""
        return JsonConsumerCommands(session)

    def reader(self, session: ConsumerSession) -> FrameHandler:
        """The end-of-topic query; any other command releases one message of the window."""
        frames = session.frames
        consumers = session.subscribers
        flow = session.flow

        async def on_frame(message: str | bytes) -> None:
            if isinstance(message, bytes):
                raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, "binary frame")
            if parse_reader_command(message):
                frames.push(end_of_topic_json(all(s.end_of_topic() for s in consumers)))
            else:
                flow.release()

        return on_frame

    def relay_tracker(self, *, producer: bool, pull_mode: bool, reader: bool) -> Tracker:
        if producer:
            return JsonProducerTracker()
        return JsonConsumerTracker(pull_mode=pull_mode, reader=reader)

    def producer_fan(self, router: PartitionRouter[int]) -> Fan:
        return JsonProducerFan(router)

    def consumer_fan(self, partitions: int, *, pull_mode: bool, reader: bool, prefetch: int) -> Fan:
        return JsonConsumerFan(partitions, pull_mode=pull_mode, reader=reader, prefetch=prefetch)


class JsonConsumerCommands:
    """A JSON consumer session's frames, applied to its subscribers (one per partition). The common frame, a
    plain ack (:func:`~.messages.plain_ack_fields`), is taken a group at a time: the front door hands every
    received group to :meth:`take_group` first (:class:`~magnetar.broker.protocols.adapter.FrameGroups`),
    which applies the run of plain acks at its head as one group per partition
    (:meth:`~magnetar.broker.core.subscriber.Subscriber.ack_group`); any other frame comes one at a time."""

    def __init__(self, session: ConsumerSession) -> None:
        self._session = session
        self._frames = session.frames
        self._consumers = session.subscribers
        self._flow = session.flow
        self._by_partition = {c.partition: c for c in session.subscribers}
        self._single = session.subscribers[0] if len(session.subscribers) == 1 else None

    def take_group(self, messages: Sequence[str | bytes], start: int) -> int:
        acks, end = plain_acks(messages, start)
        if not acks:
            return end
        single = self._single
        if single is not None and all(fields[2] == single.partition for fields in acks):
            single.ack_group([(ledger, entry, index) for ledger, entry, _, index, _ in acks])
            return end
        groups: dict[int, list[tuple[int, int, int]]] = {}
        for ledger, entry, partition, index, _ in acks:
            groups.setdefault(partition, []).append((ledger, entry, index))
        for partition, keys in groups.items():
            subscriber = self._by_partition.get(partition)
            if subscriber is not None:  # an id of another topic/partition: ignored (see subscription.py)
                subscriber.ack_group(keys)
        return end

    async def __call__(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, "binary frame")
        by_partition = self._by_partition
        fields = plain_ack_fields(message)
        if fields is not None:  # the common frame, without JSON parsing and id decoding
            ledger_id, entry_id, partition, batch_index, _ = fields
            subscriber = by_partition.get(partition)
            if subscriber is not None:
                subscriber.ack_fields(partition, ledger_id, entry_id, batch_index)
            return
        command = parse_consumer_command(message)
        kind = command.type
        if kind is CommandType.ACK or kind is CommandType.NEGATIVE_ACK:
            assert command.message_id is not None
            subscriber = by_partition.get(command.message_id.partition)
            if subscriber is None:
                return  # an id of another topic/partition: ignored (see subscription.py)
            if kind is CommandType.ACK:
                subscriber.ack(command.message_id)
            else:
                subscriber.nack(command.message_id)
        elif kind is CommandType.PERMIT:
            assert command.permit_messages is not None
            self._flow.grant(command.permit_messages)
        elif kind is CommandType.IS_END_OF_TOPIC:
            self._frames.push(end_of_topic_json(all(s.end_of_topic() for s in self._consumers)))
        elif kind is CommandType.UNSUBSCRIBE:
            try:
                for subscriber in self._consumers:
                    await subscriber.unsubscribe()
            except ServiceError as exc:
                raise WsSessionError(WsErrorCode.UNKNOWN_ERROR, f"Unsubscribe failed: {exc}") from None
            self._session.kick(CLOSE_NORMAL, "Unsubscribed")
