"""A Pulsar JSON session fanned out over a partitioned topic's partitions by the owner proxy
(:mod:`magnetar.broker.protocols.fan`). A producer's publish request goes to the partition of its ``key`` (or,
keyless, by ``messageRoutingMode``), chosen by the broker's own
:class:`~magnetar.broker.core.routing.PartitionRouter`; the answers come back unchanged (a partition
session's message ids carry its partition index). A consumer's acks go to the partition their message id
names (:class:`JsonConsumerFan`)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from magnetar.broker.core import PartitionRouter
from magnetar.broker.protocols.fan import ConsumerFan, Fan, Frame, Routed
from magnetar.broker.protocols.pulsar_ws.messages import (
    CommandType,
    end_of_topic_json,
    parse_consumer_command,
    parse_reader_command,
    plain_ack_fields,
)
from magnetar.broker.protocols.ws_errors import WsErrorCode, WsSessionError
from magnetar.broker.wire import MessageId

_DELIVERY_PREFIX = '{"messageId":"'
_END_OF_TOPIC_PREFIX = '{"endOfTopic":'
_AT_END = end_of_topic_json(True).decode()
_PLAIN_ACK_TAIL = '"}'
DELIVERED_IDS_MAX = 4096
"""Delivered message ids a JSON consumer's fan-out remembers to route their acks (about 100 bytes each)."""


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


class JsonConsumerFan(ConsumerFan):
    """A Pulsar JSON consumer or reader: acks routed by the partition of their ``messageId`` (a plain ack of
    an id delivered through this session without any decoding), a reader's release by the partition of the
    id it names."""

    def __init__(self, partitions: int, *, pull_mode: bool, reader: bool, prefetch: int) -> None:
        super().__init__(partitions, pull_mode=pull_mode, reader=reader, prefetch=prefetch)
        self._delivered_ids: dict[str, int] = {}
        """A consumer: the partition of each message id delivered and not acked yet, the newest
        ``DELIVERED_IDS_MAX`` (so an ack needs no JSON or id decoding)."""

    @property
    def remembered_ids(self) -> int:
        """Delivered message ids remembered for routing their acks."""
        return len(self._delivered_ids)

    def permit_frame(self, count: int) -> Frame:
        return orjson.dumps({"type": "permit", "permitMessages": count}).decode()

    def end_of_topic(self, at_end: bool) -> Frame:
        return end_of_topic_json(at_end).decode()

    def hand_on_frames(self, held: list[Frame]) -> list[Frame]:
        return held

    def from_client(self, message: Frame) -> Routed:
        if not isinstance(message, str):
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, "binary frame")
        if self._reader:
            if parse_reader_command(message):
                return self._ask_end_of_topic(message)
            return self._release_one(_partition_named(message), message)
        if message.startswith(_DELIVERY_PREFIX) and message.endswith(_PLAIN_ACK_TAIL):
            partition = self._delivered_ids.pop(message[len(_DELIVERY_PREFIX) : -2], None)
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
        return self._unsubscribe(message)

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        routed = Routed()
        for message in messages:
            if isinstance(message, str) and message.startswith(_DELIVERY_PREFIX):
                if not self._reader:
                    self._remember(partition, message)
                self._delivery(partition, message, 1, routed)
            elif isinstance(message, str) and message.startswith(_END_OF_TOPIC_PREFIX):
                self._end_of_topic(partition, message == _AT_END, routed)
            else:
                routed.client.append(message)
        return self._hand_on(routed)

    def _remember(self, partition: int, message: str) -> None:
        ids = self._delivered_ids
        start = len(_DELIVERY_PREFIX)
        ids[message[start : message.find('"', start)]] = partition
        if len(ids) > DELIVERED_IDS_MAX:
            del ids[next(iter(ids))]  # the oldest: its ack, if it comes, takes the full parse


def _partition_named(message: str) -> int:
    """The partition of a reader's release's ``messageId``; -1 when it names none."""
    try:
        return MessageId.from_base64(orjson.loads(message)["messageId"]).partition
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        return -1
