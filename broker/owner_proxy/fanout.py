"""A proxied session on a PARTITIONED topic: one upstream session per partition, fanned out and in at frame
level - as Pulsar's WebSocket service serves a partitioned topic through its client (a producer or consumer
per partition, each connected to that partition's owner).

When any partition of the topic is not served by this broker, the proxy serves ALL of them through
upstream sessions on ``.../<topic>-partition-<i>`` (same query and subprotocols): a partition this broker
owns gets a loopback session to this broker itself, marked proxied so it is served here. One code path
for every partition; each partition's session is an ordinary :class:`~.relay.Relay` (with its own
:mod:`magnetar.broker.protocols.relay_tracking` tracker) that follows its own partition's moves
independently. The relay's "client" is a
:class:`PartitionPort` of this module instead of the client's WebSocket, so every promise of the relay
holds per partition: a partition whose session ends with an unknown outcome fails back only its own
pending messages (``send-error:8`` / ``SEND_ERROR`` with their own context or request id), the others go on.

What the fan-out changes between the client and the partitions (the sans-IO cores below):

* **JSON producer** (:class:`JsonProducerFan`): each publish request goes to the partition of its ``key``
  (or, keyless, by ``messageRoutingMode``), chosen by the broker's own
  :class:`~magnetar.broker.core.routing.PartitionRouter` from the session's ``messageRoutingMode`` /
  ``hashingScheme``; the answers come back unchanged (a partition session's message ids carry its partition
  index, as a local partitioned session's do).
* **magnetar.v1 producer** (:class:`BinaryProducerFan`): a SEND frame is cut into runs of consecutive
  messages for the same partition exactly as a local session cuts it
  (:func:`~magnetar.broker.protocols.magnetar_v1.producer.route_frame`); each run goes to its partition as a
  SEND of its own (request ids numbered by the proxy per partition), and the client gets what a local
  session answers: one RECEIPT with every run's ranges in frame order once all runs are stored, or one
  SEND_ERROR (the first failure) otherwise.
* **consumer** (:class:`ConsumerFan`, JSON and binary): deliveries of every partition go to the client;
  acks and negative acks go to the partition their message id names (a binary ACK / ACK_RANGE / NACK is
  split per partition); ``unsubscribe`` goes to every partition and the session ends 1000 once all have
  ended; ``isEndOfTopic`` asks every partition and answers true only if all are at their end (a partition
  that moves meanwhile answers false: :mod:`magnetar.broker.protocols.relay_tracking`). Pull mode
  (``pullMode=true``): the proxy keeps ``ws_proxy_partition_prefetch_messages`` permits granted to each
  partition and holds deliveries beyond the client's own permits (at most that many per partition), so the
  client never gets more than it permitted; each message handed on is granted again to its partition.
* **reader** (only ``earliest`` / ``latest`` starts, as for a local partitioned reader): deliveries fanned
  in; a JSON reader's per-message release goes to the partition its message id names (else to the partition
  of the oldest unreleased delivery); a binary PERMIT releases the oldest deliveries, split per partition.

Errors: the upstream sessions are opened concurrently, ``ws_proxy_partition_opens_max`` at a time; the
first refusal that retrying cannot cure (400, 401, 403, 404, 409, 412:
:data:`~.relay.OPEN_FINAL_STATUSES`) refuses the client's upgrade with the same status and reason, and a
partition whose owner cannot be reached within ``ws_proxy_reconnect_deadline_ms`` makes it 503; either way
the sessions already open are closed. Once running, a partition unreachable within the deadline closes the
client's session with 1001, and any partition session ending for good (a 4xxx session error, or 1000 other
than after an unsubscribe) closes it with that code. The client leaving closes every upstream session.
Bounds: the session's upstream sessions, one per partition, each count in ``ws_proxy_sessions_max`` (a
session that would pass it is refused 503 before any is opened); each port holds
at most ``ws_proxy_buffer_messages_max`` client frames (at least one) waiting for its relay; a JSON
consumer remembers at most ``DELIVERED_IDS_MAX`` delivered ids.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson
import trio

from magnetar.bookkeeper.runtime.http import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    WebSocket,
    WebSocketClosed,
    WsClient,
)
from magnetar.broker.core import PartitionRouter
from magnetar.broker.owner_proxy.relay import Connect, Relay, send_frames
from magnetar.broker.protocols.magnetar_v1.producer import route_frame
from magnetar.broker.protocols.outbound import RECORDS_FRAME_BYTES_MAX
from magnetar.broker.protocols.pulsar_ws.messages import (
    CommandType,
    end_of_topic_json,
    parse_consumer_command,
    parse_reader_command,
    plain_ack_fields,
)
from magnetar.broker.protocols.relay_tracking import Tracker
from magnetar.broker.protocols.ws_errors import WsErrorCode, WsSessionError
from magnetar.broker.wire import MessageId
from magnetar.broker.wire.magnetar_v1 import (
    BinaryFrameError,
    FrameType,
    Position3,
    ReceiptRange,
    encode_ack_ranges,
    encode_ids,
    encode_permit,
    encode_receipt,
    encode_send_error,
    encode_send_run,
    end_of_topic_frame,
    message_records,
    messages_frame,
    parse_consumer_frame,
    parse_receipt,
    parse_send,
)

if TYPE_CHECKING:
    from magnetar.broker.owner_proxy.metrics import ProxyCounters
    from magnetar.broker.proxy_settings import ProxySettings

log = logging.getLogger(__name__)

Frame = str | bytes

_JSON_DELIVERY_PREFIX = '{"messageId":"'
_JSON_END_OF_TOPIC_PREFIX = '{"endOfTopic":'
_PLAIN_ACK_TAIL = '"}'
DELIVERED_IDS_MAX = 4096
"""Delivered message ids a JSON consumer's fan-out remembers to route their acks (about 100 bytes each)."""


@dataclass
class Routed:
    """What one frame turns into: frames for partitions (in order), frames for the client, and permits to
    grant to partitions (pull mode)."""

    partitions: list[tuple[int, Frame]] = field(default_factory=list)
    client: list[Frame] = field(default_factory=list)
    permits: dict[int, int] = field(default_factory=dict)

    def grant(self, partition: int, count: int) -> None:
        self.permits[partition] = self.permits.get(partition, 0) + count


class Fan:
    """The sans-IO core of a fanned-out session: the base forwards nothing it does not understand."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.unsubscribing = False
        """An unsubscribe went to every partition: their 1000 closes end the session normally."""

    def opening(self) -> Routed:
        """Frames sent to the partitions when the session starts."""
        return Routed()

    def from_client(self, message: Frame) -> Routed:
        raise NotImplementedError

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        return Routed(client=list(messages))

    def permit_frame(self, count: int) -> Frame:
        """A pull-mode permit for one partition's session, in the session's protocol."""
        raise NotImplementedError


# -- producers ---------------------------------------------------------------------------------------------


class JsonProducerFan(Fan):
    """A Pulsar JSON producer: each publish request to its key's (or the routing mode's) partition."""

    def __init__(self, router: PartitionRouter[int]) -> None:
        super().__init__(len(router.producers))
        self._router = router

    def from_client(self, message: Frame) -> Routed:
        key: str | None = None
        if isinstance(message, str):
            try:
                document = orjson.loads(message)
            except orjson.JSONDecodeError:
                document = None
            if isinstance(document, dict) and isinstance(document.get("key"), str):
                key = document["key"]
        # a frame that is no publish request goes to some partition, whose session answers the error
        return Routed(partitions=[(self._router.route(key), message)])


@dataclass
class _SendState:
    """One client SEND frame split over partitions."""

    request_id: int
    ranges: list[tuple[ReceiptRange, ...] | None]
    remaining: int
    done: bool = False


class BinaryProducerFan(Fan):
    """A ``magnetar.v1`` producer: SEND frames split per partition, their answers merged into one."""

    def __init__(self, router: PartitionRouter[int]) -> None:
        super().__init__(len(router.producers))
        self._router = router
        self._next_request = [0] * self.partitions
        self._waiting: dict[tuple[int, int], tuple[_SendState, int]] = {}
        """(partition, upstream request id) -> the client frame and the run's slot in it."""

    def from_client(self, message: Frame) -> Routed:
        code = WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON
        if isinstance(message, str):
            reason = "a magnetar.v1 session carries binary frames only"
            return Routed(client=[encode_send_error(0, code, reason)])
        try:
            send = parse_send(message)
        except BinaryFrameError as exc:
            return Routed(client=[encode_send_error(exc.request_id or 0, code, str(exc))])
        runs = route_frame(self._router, send)
        state = _SendState(send.request_id, [None] * len(runs), len(runs))
        routed = Routed()
        for slot, (partition, run) in enumerate(runs):
            request_id = self._next_request[partition]
            self._next_request[partition] = request_id + 1
            self._waiting[(partition, request_id)] = (state, slot)
            routed.partitions.append((partition, encode_send_run(request_id, run)))
        return routed

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        routed = Routed()
        for message in messages:
            if not isinstance(message, bytes) or message[:1] not in (_RECEIPT, _SEND_ERROR):
                routed.client.append(message)
                continue
            try:
                receipt = parse_receipt(message)
            except BinaryFrameError:
                continue  # an owner's frame the proxy cannot read: nothing to answer with it
            waiting = self._waiting.pop((partition, receipt.request_id), None)
            if waiting is None:
                continue
            state, slot = waiting
            if state.done:
                continue
            if not receipt.ok:
                state.done = True
                routed.client.append(encode_send_error(state.request_id, receipt.error_code, receipt.reason))
                continue
            state.ranges[slot] = receipt.ranges
            state.remaining -= 1
            if state.remaining == 0:
                state.done = True
                merged = [r for ranges in state.ranges if ranges is not None for r in ranges]
                routed.client.append(encode_receipt(state.request_id, merged))
        return routed

    @property
    def waiting(self) -> int:
        """Runs sent to partitions and not answered yet."""
        return len(self._waiting)


_RECEIPT = bytes([FrameType.RECEIPT])
_SEND_ERROR = bytes([FrameType.SEND_ERROR])
_MESSAGES = bytes([FrameType.MESSAGES])
_END_OF_TOPIC = bytes([FrameType.END_OF_TOPIC])


# -- consumers and readers ---------------------------------------------------------------------------------


class ConsumerFan(Fan):
    """A consumer or reader (JSON or ``magnetar.v1``) over every partition's session."""

    def __init__(
        self, partitions: int, *, binary: bool, pull_mode: bool, reader: bool, prefetch: int
    ) -> None:
        super().__init__(partitions)
        self._binary = binary
        self._reader = reader
        self._pull = pull_mode and not reader
        self._prefetch = prefetch
        self.client_permits = 0
        """Pull mode: permits the client granted and no delivery used yet."""
        self.held: deque[tuple[int, Frame]] = deque()
        """Pull mode: deliveries (a JSON message, a binary record) waiting for the client's permits."""
        self._queries: deque[list[int]] = deque()
        """isEndOfTopic questions asked of every partition: [answers still due, all true so far (0/1)]."""
        self._answered = [0] * partitions
        """Per partition: how many of the questions in ``_queries`` it has answered."""
        self._delivered: deque[list[int]] = deque()
        """A reader's deliveries not yet released, oldest first: [partition, messages] (at most its windows'
        worth: each partition's session delivers no more until released)."""
        self._delivered_ids: dict[str, int] = {}
        """A JSON consumer: the partition of each message id delivered and not acked yet, the newest
        ``DELIVERED_IDS_MAX`` (so an ack needs no JSON or id decoding)."""

    @property
    def remembered_ids(self) -> int:
        """A JSON consumer: delivered message ids remembered for routing their acks."""
        return len(self._delivered_ids)

    @property
    def unreleased(self) -> int:
        """A reader's deliveries the client has not released yet."""
        return sum(count for _, count in self._delivered)

    def opening(self) -> Routed:
        routed = Routed()
        if self._pull:
            for partition in range(self.partitions):
                routed.grant(partition, self._prefetch)
        return routed

    def permit_frame(self, count: int) -> Frame:
        if self._binary:
            return encode_permit(count)
        return orjson.dumps({"type": "permit", "permitMessages": count}).decode()

    # client -> partitions

    def from_client(self, message: Frame) -> Routed:
        if self._binary:
            return self._binary_from_client(message)
        if not isinstance(message, str):
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, "binary frame")
        if self._reader:
            if parse_reader_command(message):
                return self._ask_end_of_topic(message)
            return self._release_json(message)
        if message.startswith(_JSON_DELIVERY_PREFIX) and message.endswith(_PLAIN_ACK_TAIL):
            partition = self._delivered_ids.pop(message[len(_JSON_DELIVERY_PREFIX) : -2], None)
            if partition is not None:  # the common frame: an ack of an id delivered through this session
                return Routed(partitions=[(partition, message)])
        fields = plain_ack_fields(message)
        if fields is not None:
            return self._to_partition(fields[2], message)
        command = parse_consumer_command(message)
        kind = command.type
        if kind is CommandType.ACK or kind is CommandType.NEGATIVE_ACK:
            assert command.message_id is not None
            return self._to_partition(command.message_id.partition, message)
        if kind is CommandType.PERMIT:
            assert command.permit_messages is not None
            return self._client_permits(command.permit_messages, message)
        if kind is CommandType.IS_END_OF_TOPIC:
            return self._ask_end_of_topic(message)
        self.unsubscribing = True
        return self._everyone(message)

    def _binary_from_client(self, message: Frame) -> Routed:
        if not isinstance(message, bytes):
            reason = "a magnetar.v1 session carries binary frames only"
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, reason)
        try:
            frame = parse_consumer_frame(message)
        except BinaryFrameError as exc:
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, str(exc)) from None
        kind = frame.type
        if self._reader:
            if kind is FrameType.PERMIT:
                return self._release(frame.count)
            if kind is FrameType.IS_END_OF_TOPIC:
                return self._ask_end_of_topic(message)
            raise WsSessionError(
                WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, f"a reader does not take {kind.name}"
            )
        if kind is FrameType.ACK or kind is FrameType.NACK:
            ids: dict[int, list[tuple[int, int, int, int, int]]] = {}
            for message_id in frame.ids:
                if 0 <= message_id[0] < self.partitions:
                    ids.setdefault(message_id[0], []).append(message_id)
            return Routed(partitions=[(p, encode_ids(kind, group)) for p, group in ids.items()])
        if kind is FrameType.ACK_RANGE:
            ranges: dict[int, list[tuple[int, Position3, Position3]]] = {}
            for ack_range in frame.ranges:
                if 0 <= ack_range[0] < self.partitions:
                    ranges.setdefault(ack_range[0], []).append(ack_range)
            return Routed(partitions=[(p, encode_ack_ranges(group)) for p, group in ranges.items()])
        if kind is FrameType.PERMIT:
            return self._client_permits(frame.count, message)
        if kind is FrameType.IS_END_OF_TOPIC:
            return self._ask_end_of_topic(message)
        self.unsubscribing = True
        return self._everyone(message)

    def _to_partition(self, partition: int, message: Frame) -> Routed:
        """An id of no partition of this topic is ignored, as a local session ignores it."""
        if 0 <= partition < self.partitions:
            return Routed(partitions=[(partition, message)])
        return Routed()

    def _everyone(self, message: Frame) -> Routed:
        return Routed(partitions=[(partition, message) for partition in range(self.partitions)])

    def _client_permits(self, count: int, message: Frame) -> Routed:
        if not self._pull:
            return self._everyone(message)  # push mode: each partition's session does what a local one does
        self.client_permits += count
        return self._hand_on(Routed())

    def _ask_end_of_topic(self, message: Frame) -> Routed:
        self._queries.append([self.partitions, 1])
        return self._everyone(message)

    def _release_json(self, message: str) -> Routed:
        """A JSON reader's release: to the partition its message id names, else the oldest delivery's."""
        partition = -1
        try:
            document = orjson.loads(message)
            partition = MessageId.from_base64(document["messageId"]).partition
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            pass
        if 0 <= partition < self.partitions:
            for run in self._delivered:  # its oldest unreleased delivery: near the head when read in order
                if run[0] == partition:
                    run[1] -= 1
                    if run[1] == 0:
                        self._delivered.remove(run)
                    break
            return Routed(partitions=[(partition, message)])
        if self._delivered:
            head = self._delivered[0]
            head[1] -= 1
            if head[1] == 0:
                self._delivered.popleft()
            return Routed(partitions=[(head[0], message)])
        return Routed(partitions=[(0, message)])  # nothing delivered: the partition's session ignores it

    def _release(self, count: int) -> Routed:
        """A binary reader's PERMIT: releases its oldest deliveries, per partition."""
        routed = Routed()
        while count > 0 and self._delivered:
            head = self._delivered[0]
            taken = min(count, head[1])
            routed.grant(head[0], taken)
            head[1] -= taken
            count -= taken
            if head[1] == 0:
                self._delivered.popleft()
        routed.partitions = [(p, encode_permit(n)) for p, n in routed.permits.items()]
        routed.permits = {}
        return routed

    # partitions -> client

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        routed = Routed()
        for message in messages:
            if isinstance(message, str):
                if message.startswith(_JSON_DELIVERY_PREFIX):
                    self._delivery(partition, message, 1, routed)
                elif message.startswith(_JSON_END_OF_TOPIC_PREFIX):
                    self._end_of_topic(partition, message == end_of_topic_json(True).decode(), routed)
                else:
                    routed.client.append(message)
            elif message[:1] == _MESSAGES:
                if self._pull:
                    for record in message_records(message):
                        self.held.append((partition, record))
                else:
                    self._delivery(partition, message, int.from_bytes(message[1:5], "little"), routed)
            elif message[:1] == _END_OF_TOPIC:
                self._end_of_topic(partition, message == end_of_topic_frame(True), routed)
            else:
                routed.client.append(message)
        return self._hand_on(routed)

    def _delivery(self, partition: int, message: Frame, count: int, routed: Routed) -> None:
        if isinstance(message, str) and not self._reader:
            ids = self._delivered_ids
            start = len(_JSON_DELIVERY_PREFIX)
            ids[message[start : message.find('"', start)]] = partition
            if len(ids) > DELIVERED_IDS_MAX:
                del ids[next(iter(ids))]  # the oldest: its ack, if it comes, takes the full parse
        if self._pull:
            self.held.append((partition, message))
            return
        if self._reader and count:
            if self._delivered and self._delivered[-1][0] == partition:
                self._delivered[-1][1] += count
            else:
                self._delivered.append([partition, count])
        routed.client.append(message)

    def _end_of_topic(self, partition: int, at_end: bool, routed: Routed) -> None:
        index = self._answered[partition]
        if index >= len(self._queries):
            return  # an answer to no question asked through the proxy
        self._answered[partition] = index + 1
        query = self._queries[index]
        query[0] -= 1
        query[1] &= int(at_end)
        while self._queries and self._queries[0][0] == 0:
            done = self._queries.popleft()
            self._answered = [n - 1 for n in self._answered]
            all_at_end = bool(done[1])
            routed.client.append(
                end_of_topic_frame(all_at_end) if self._binary else end_of_topic_json(all_at_end).decode()
            )

    def _hand_on(self, routed: Routed) -> Routed:
        """Pull mode: hand held deliveries on while the client has permits; grant each again upstream."""
        records: list[bytes] = []
        size = 0
        while self.held and self.client_permits > 0:
            partition, message = self.held.popleft()
            self.client_permits -= 1
            routed.grant(partition, 1)
            if isinstance(message, str):
                routed.client.append(message)
                continue
            if records and size + len(message) > RECORDS_FRAME_BYTES_MAX:
                routed.client.append(messages_frame(records))  # frames as large as a local session's
                records, size = [], 0
            records.append(message)
            size += len(message)
        if records:
            routed.client.append(messages_frame(records))
        return routed


# -- the session ---------------------------------------------------------------------------------------------


class PartitionPort:
    """One partition's relay sees the fan-out as its client (:class:`~.relay.ClientSide`): it receives the
    frames routed to its partition (at most ``frames_max`` waiting, plus the permits granted meanwhile, sent
    as one permit frame) and hands what it would send the client to the fan-out."""

    def __init__(self, index: int, session: FanOutSession, frames_max: int) -> None:
        self.index = index
        self._session = session
        self._frames_max = max(1, frames_max)
        self._frames: deque[Frame] = deque()
        self._permits = 0
        self._changed = trio.Event()
        self._closed = False
        self.ended: tuple[int, str] | None = None
        """How the relay ended this partition's session (its close code and reason)."""

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, message: Frame) -> None:
        """Queue a client frame for the partition (waits for room: back-pressure to the client)."""
        while len(self._frames) >= self._frames_max and not self._closed:
            await self._changed.wait()
        if not self._closed:
            self._frames.append(message)
            self._wake()

    def grant(self, count: int) -> None:
        self._permits += count
        self._wake()

    def shut(self) -> None:
        """The client is gone: the relay's next receive ends its session."""
        self._closed = True
        self._wake()

    async def receive_batch(self) -> list[Frame]:
        while True:
            if self._closed:
                raise WebSocketClosed(CLOSE_NORMAL, "the client's session ended")
            if self._frames or self._permits:
                batch: list[Frame] = []
                if self._permits:
                    batch.append(self._session.fan.permit_frame(self._permits))
                    self._permits = 0
                batch.extend(self._frames)
                self._frames.clear()
                self._wake()
                return batch
            await self._changed.wait()

    async def send_many(self, messages: Sequence[bytes], *, text: bool) -> None:
        frames: list[Frame] = [m.decode() for m in messages] if text else list(messages)
        await self._session.from_partition(self.index, frames)

    async def send_text(self, text: str) -> None:
        await self._session.from_partition(self.index, [text])

    async def send_bytes(self, data: bytes) -> None:
        await self._session.from_partition(self.index, [data])

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        self.ended = (code, reason)
        self._closed = True
        self._wake()


class FanOutSession:
    """Runs a client's session over one relay per partition (already connected upstream sessions)."""

    def __init__(
        self,
        ws: WebSocket,
        fan: Fan,
        upstreams: list[WsClient],
        trackers: list[Tracker],
        connects: list[Connect],
        settings: ProxySettings,
        topic: str,
        counters: ProxyCounters | None = None,
    ) -> None:
        self._ws = ws
        self.fan = fan
        self._topic = topic
        frames_max = settings.ws_proxy_buffer_messages_max
        self.ports = [PartitionPort(i, self, frames_max) for i in range(len(upstreams))]
        self.relays = [
            Relay(port, upstream, tracker, connect, settings, f"{topic}-partition-{i}", counters)
            for i, (port, upstream, tracker, connect) in enumerate(
                zip(self.ports, upstreams, trackers, connects, strict=True)
            )
        ]
        self._close: tuple[int, str] | None = None
        self._ended = 0
        self._reader_scope = trio.CancelScope()

    async def run(self) -> None:
        """Until the client leaves or the session ends: then every port is shut, so each relay closes its
        upstream session and ends by itself (none is cancelled midway)."""
        try:
            async with trio.open_nursery() as nursery:
                self._apply(self.fan.opening())
                for index, relay in enumerate(self.relays):
                    nursery.start_soon(self._partition, index, relay)
                nursery.start_soon(self._client_reader)
        finally:
            for port in self.ports:
                port.shut()
        if not self._ws.closed:
            code, reason = self._close or (CLOSE_NORMAL, "")
            with trio.CancelScope(shield=True):
                await self._ws.close(code, reason)

    def _finish(self, close: tuple[int, str] | None) -> None:
        """End the session (``close``: how, unless the client left): stop reading the client, shut every
        port."""
        if self._close is None:
            self._close = close
        self._reader_scope.cancel()
        for port in self.ports:
            port.shut()

    async def _partition(self, index: int, relay: Relay) -> None:
        await relay.run()
        code, reason = self.ports[index].ended or (CLOSE_GOING_AWAY, "")
        if self.ports[index].ended is None or self._ws.closed:
            self._finish(None)  # shut by the fan-out: the session is ending already
            return
        if code == CLOSE_NORMAL and self.fan.unsubscribing:
            self._ended += 1
            if self._ended == len(self.relays):
                self._finish((code, reason))
            return
        log.info("proxy: %s partition %d ended (%s %s): closing the client's session", self._topic, index,
                 code, reason)  # fmt: skip
        self._finish((code, reason))

    async def _client_reader(self) -> None:
        with self._reader_scope:
            try:
                while True:
                    for message in await self._ws.receive_batch():
                        try:
                            routed = self.fan.from_client(message)
                        except WsSessionError as exc:
                            self._finish((exc.close_code, exc.reason))
                            return
                        await self._deliver(routed)
            except WebSocketClosed:
                self._finish(None)  # the client went away: end every upstream session too

    async def from_partition(self, index: int, messages: list[Frame]) -> None:
        await self._deliver(self.fan.from_partition(index, messages))

    async def _deliver(self, routed: Routed) -> None:
        self._apply(routed)
        for partition, frame in routed.partitions:
            await self.ports[partition].put(frame)
        if routed.client:
            await send_frames(self._ws, routed.client)

    def _apply(self, routed: Routed) -> None:
        for partition, count in routed.permits.items():
            self.ports[partition].grant(count)
