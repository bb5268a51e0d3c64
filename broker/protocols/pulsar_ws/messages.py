"""The JSON frames of Pulsar's WebSocket API (``pulsar-websocket``'s ``data`` package), sans-IO.

Inbound, parsed as ``ProducerHandler``/``ConsumerHandler``/``ReaderHandler`` do with Pulsar's Jackson mapper
(unknown fields ignored, scalars coerced to the declared type: ``"context": 1`` is the string ``"1"``,
``"deliverAt": "5"`` the number 5):

* publish request ``{"payload","properties","context","key","replicationClusters","eventTime","sequenceId",
  "disableReplication","deliverAt","deliverAfterMs","schemaVersion",...}``. Not JSON / wrong types ->
  ``send-error:3`` (no context echoed); payload missing -> ``send-error:7``; payload not base64 ->
  ``send-error:7`` ``"Invalid Base64 message-payload error=..."``; ``eventTime`` not ISO-8601 ->
  ``send-error:7``;
* consumer command ``{"type","messageId","permitMessages"}``: no/unknown ``type`` is an individual ack;
  ``negativeAcknowledge``, ``permit`` (``permitMessages`` required), ``unsubscribe``, ``isEndOfTopic``. A
  frame that is not such JSON closes the session with Pulsar's code 3 (sent as 4003, see :mod:`..ws_errors`);
  Magnetar treats a missing or undecodable ``messageId`` the same way (Pulsar let that exception escape), and
  a negative ``permitMessages`` too (Pulsar would add it to its pending count, silently withholding that many
  more deliveries);
* reader frame: ``{"type":"isEndOfTopic"}`` asks for the end-of-topic flag, anything else is an "ack" that
  only releases the delivery window.

Outbound, byte-exact with Jackson's output (field order of the Java classes, ``@JsonInclude(NON_NULL)``,
primitives always present):

* ``ProducerAck``: ``{"result":"ok","messageId":"CAAQAw==","context":"1","errorCode":0,"schemaVersion":0}``;
  an error ``{"result":"send-error:7","errorMsg":"...","context":"1","errorCode":0,"schemaVersion":0}``;
* ``ConsumerMessage``: ``messageId, payload, properties, publishTime, redeliveryCount[, eventTime][, key]``
  with times formatted by :mod:`magnetar.broker.wire.date_format` (``eventTime`` only when non-zero, ``key``
  only when the message
  has one);
* ``EndOfTopicResponse``: ``{"endOfTopic":true}``.

JSON goes through orjson: on this machine it parses a publish request ~3x faster than the standard library
and writes a ConsumerMessage ~3x faster (see tests/bench/RESULTS.md), which is most of the per-message cost.
A producer's frames of one read are parsed in one pass (:func:`parse_publish_batch`), the payload decoded by
``pybase64`` (:func:`~magnetar.broker.wire.decode_base64_java`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, tzinfo
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson
from pybase64 import b64encode

from magnetar.broker.protocols.ws_errors import WsErrorCode, WsSessionError
from magnetar.broker.wire import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    BrokerError,
    DateParseError,
    InvalidMessageIdError,
    MessageId,
    decode_base64_java,
    delivered_id_fields,
    format_timestamp,
    is_decimal_integer,
    parse_timestamp,
)

# --- publish request ----------------------------------------------------------------------------------------


class PublishError(BrokerError):
    """A publish request that cannot be sent: answered with a ``send-error:N`` ack, the session stays open."""

    def __init__(self, code: WsErrorCode, message: str, context: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.context = context

    def ack_json(self) -> bytes:
        return producer_ack_error(self.code, self.message, self.context)


class _Coercion(Exception):
    """Internal: a JSON value has a type Jackson would refuse for the field."""


class PublishRequest(NamedTuple):
    """One parsed publish request (a named tuple: built for every message, and a frozen dataclass of this
    many fields costs several microseconds to build)."""

    payload: bytes
    properties: Mapping[str, str] = MappingProxyType({})
    context: str | None = None
    key: str | None = None
    replication_clusters: tuple[str, ...] | None = None
    event_time_ms: int = 0
    """0 when the request has no ``eventTime`` (Pulsar's "no event time")."""
    sequence_id: int | None = None
    """The client's sequence id; None when the request has none (the producer numbers it: deduplication
    keys on it, :mod:`magnetar.broker.core.dedup`)."""
    disable_replication: bool = False
    deliver_at_ms: int = 0
    deliver_after_ms: int = 0
    schema_version: int = 0


def _kind(value: Any) -> str:
    return type(value).__name__


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise _Coercion(f"Cannot deserialize value of type `java.lang.String` from {_kind(value)}")


def _as_long(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise _Coercion("Cannot coerce boolean to `long`")
    if isinstance(value, float):
        value = int(value)  # Jackson ACCEPT_FLOAT_AS_INT: truncates
    elif isinstance(value, str):
        text = value.strip()  # Jackson trims a string it coerces to a number
        if not text:
            return 0
        if not is_decimal_integer(text):  # ASCII digits only: no "1_0", no other scripts' digits
            raise _Coercion(f"Cannot deserialize value of type `long` from String {value!r}")
        value = int(text)
    if not isinstance(value, int):
        raise _Coercion(f"Cannot deserialize value of type `long` from {_kind(value)}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise _Coercion(f"Numeric value ({value}) out of range of long")
    return value


def _as_optional_long(value: Any) -> int | None:
    """A ``Long`` that may be absent: null, missing or an empty string (Jackson's coercion of "" to a
    boxed number) is None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _as_long(value)


def _as_bool(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    raise _Coercion(f"Cannot deserialize value of type `boolean` from {_kind(value)}")


def _as_properties(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Coercion(f"Cannot deserialize value of type `java.util.Map` from {_kind(value)}")
    out: dict[str, str] = {}
    for name, item in value.items():
        text = _as_text(item)
        if text is None:
            raise _Coercion(f"property {name!r} has a null value")
        out[name] = text
    return out


def _as_clusters(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Coercion(f"Cannot deserialize value of type `java.util.List` from {_kind(value)}")
    clusters = []
    for item in value:
        text = _as_text(item)
        if text is None:
            raise _Coercion("replicationClusters contains null")
        clusters.append(text)
    return tuple(clusters)


def _load_object(text: str | bytes) -> dict[str, Any]:
    """Parse a JSON object; raises ``_Coercion`` with the parser's message."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise _Coercion(str(exc)) from None
    if not isinstance(data, dict):
        raise _Coercion(f"Cannot deserialize value of type object from {_kind(data)}")
    return data


def parse_publish_request(text: str | bytes) -> PublishRequest:
    """Parse one producer frame; :class:`PublishError` carries the ``send-error`` Pulsar would answer."""
    context: str | None = None
    try:
        data = _load_object(text)
        fast = _parse_plain_publish(data)
        if fast is not None:
            return fast
        context = _as_text(data.get("context"))
        payload_field = data.get("payload")
        if isinstance(payload_field, dict | list):
            raise _Coercion(
                f"Cannot deserialize value of type `java.lang.String` from {_kind(payload_field)}"
            )
        request = PublishRequest(
            payload=b"",
            properties=_as_properties(data.get("properties")),
            context=context,
            key=_as_text(data.get("key")),
            replication_clusters=_as_clusters(data.get("replicationClusters")),
            sequence_id=_as_optional_long(data.get("sequenceId")),
            disable_replication=_as_bool(data.get("disableReplication")),
            deliver_at_ms=_as_long(data.get("deliverAt")),
            deliver_after_ms=_as_long(data.get("deliverAfterMs")),
            schema_version=_as_long(data.get("schemaVersion")),
        )
        event_time = _as_text(data.get("eventTime"))
        payload_text = _as_text(payload_field)
    except _Coercion as exc:
        raise PublishError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, str(exc)) from None
    if payload_text is None:
        raise PublishError(WsErrorCode.PAYLOAD_ENCODING_ERROR, "Missing payload", context)
    try:
        payload = decode_base64_java(payload_text)
    except ValueError as exc:
        raise PublishError(
            WsErrorCode.PAYLOAD_ENCODING_ERROR, f"Invalid Base64 message-payload error={exc}", context
        ) from None
    event_time_ms = 0
    if event_time is not None:
        try:
            event_time_ms = parse_timestamp(event_time)
        except DateParseError as exc:
            raise PublishError(WsErrorCode.PAYLOAD_ENCODING_ERROR, str(exc), context) from None
    return PublishRequest(
        payload,
        request.properties,
        request.context,
        request.key,
        request.replication_clusters,
        event_time_ms,
        request.sequence_id,
        request.disable_replication,
        request.deliver_at_ms,
        request.deliver_after_ms,
        request.schema_version,
    )


BINARY_PUBLISH_REASON = "Binary frames are not supported: send the JSON request as a text frame"
_PLAIN_TAIL = (None, None, 0, None, False, 0, 0, 0)
"""The fields of a plain request after ``payload, properties, context``: all defaults."""
_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


def parse_publish_batch(frames: Sequence[str | bytes]) -> list[PublishRequest | PublishError]:
    """:func:`parse_publish_request` of each frame of one read, in order, a frame that cannot be sent given
    as its :class:`PublishError` (a binary frame: ``send-error:3``). One pass over the frames: the common
    request - ``{"payload": "...", "context": "..."}`` with a string context, or the payload alone - is parsed
    inline (one ``orjson`` call, one base64 decode, the tuple built without the named tuple's constructor),
    the rest by :func:`parse_publish_request`; the results are the same (``test_ws_publish_batch.py``)."""
    out: list[PublishRequest | PublishError] = []
    append = out.append
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    decode = decode_base64_java
    new = tuple.__new__
    tail = _PLAIN_TAIL
    empty = _NO_PROPERTIES
    for frame in frames:
        if type(frame) is str:
            try:
                data = loads(frame)
            except decode_error:
                data = None
            if type(data) is dict:
                payload_text = data.get("payload")
                size = len(data)
                context = data.get("context")
                if type(payload_text) is str and (size == 1 or (size == 2 and type(context) is str)):
                    try:
                        payload = decode(payload_text)
                    except ValueError as exc:
                        code = WsErrorCode.PAYLOAD_ENCODING_ERROR
                        append(PublishError(code, f"Invalid Base64 message-payload error={exc}", context))
                        continue
                    append(new(PublishRequest, (payload, empty, context, *tail)))
                    continue
            try:
                append(parse_publish_request(frame))
            except PublishError as exc:  # a fresh one: the caught one's traceback holds the parser's frames
                append(PublishError(exc.code, exc.message, exc.context))
        else:
            append(PublishError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, BINARY_PUBLISH_REASON))
    return out


def _parse_plain_publish(data: dict[str, Any]) -> PublishRequest | None:
    """The common request, ``{"payload": "...", "context": "..."}`` (context optional), without the general
    path's per-field coercions; None for anything else. Gives exactly what the general path gives."""
    payload_text = data.get("payload")
    if type(payload_text) is not str:
        return None
    size = len(data)
    context = data.get("context")
    if not (size == 1 or (size == 2 and type(context) is str)):
        return None
    try:
        payload = decode_base64_java(payload_text)
    except ValueError as exc:
        raise PublishError(
            WsErrorCode.PAYLOAD_ENCODING_ERROR, f"Invalid Base64 message-payload error={exc}", context
        ) from None
    return PublishRequest(payload, {}, context)


# --- outbound frames ----------------------------------------------------------------------------------------


PRODUCER_ACK_OK = b'{"result":"ok","messageId":"%b","errorCode":0,"schemaVersion":0}'
"""A ``ProducerAck`` of a request without a context: its base64 message id goes in (no escaping needed)."""
PRODUCER_ACK_OK_CONTEXT = b'{"result":"ok","messageId":"%b","context":%b,"errorCode":0,"schemaVersion":0}'
"""A ``ProducerAck`` with a context: the base64 id, then the context as a JSON string (``orjson.dumps``)."""


def producer_ack_ok(message_id: MessageId | str | bytes, context: str | None) -> bytes:
    """``{"result":"ok","messageId":...,"context":...,"errorCode":0,"schemaVersion":0}`` (context omitted
    when the request had none). Written from a template (one per message published over the JSON API): a
    base64 id needs no escaping, the context is escaped by ``orjson``."""
    if isinstance(message_id, MessageId):
        message_id = message_id.to_base64()
    encoded = message_id.encode("ascii") if isinstance(message_id, str) else message_id
    if context is None:
        return PRODUCER_ACK_OK % encoded
    return PRODUCER_ACK_OK_CONTEXT % (encoded, orjson.dumps(context))


def producer_ack_error(
    code: WsErrorCode, error_msg: str | None, context: str | None, message_id: str | None = None
) -> bytes:
    ack: dict[str, Any] = {"result": code.send_error}
    if error_msg is not None:
        ack["errorMsg"] = error_msg
    if message_id is not None:
        ack["messageId"] = message_id
    if context is not None:
        ack["context"] = context
    ack["errorCode"] = 0
    ack["schemaVersion"] = 0
    return orjson.dumps(ack)


_CONSUMER_MESSAGE = (
    b'{"messageId":"%b","payload":"%b","properties":%b,"publishTime":"%b","redeliveryCount":%d}'
)
CONSUMER_MESSAGE_PLAIN = (
    b'{"messageId":"%b","payload":"%b","properties":{},"publishTime":"%b","redeliveryCount":%d}'
)
"""The ``ConsumerMessage`` of a message without properties, key and event time, filled with the base64 id,
the base64 payload, the publish time and the redelivery count (the dispatch hot path's template)."""
CONSUMER_MESSAGE_HEAD = b'{"messageId":"%b","payload":"%b","properties":{},"publishTime":"'
CONSUMER_MESSAGE_FIRST_TAIL = b'","redeliveryCount":0}'
""":data:`CONSUMER_MESSAGE_PLAIN` in two pieces around the publish time: ``HEAD + time + FIRST_TAIL`` is the
template of one publish time for messages delivered the first time, filled with the id and the payload."""


def consumer_message_frame(
    message_id: bytes,
    payload: bytes,
    properties: Mapping[str, str],
    publish_time: bytes,
    redelivery_count: int,
    event_time: bytes | None,
    key: str | None,
) -> bytes:
    """One ``ConsumerMessage`` frame (consumer and reader) from its parts as the dispatch hot path has them:
    the base64 id and the ISO 8601 times as ASCII bytes. Written from a template rather than by ``orjson``
    from a dict, which cost ~0.7 us more per message (RESULTS.md): the id, the base64 payload and the times
    need no escaping; properties and key go through ``orjson``. ``eventTime`` and ``key`` only when set."""
    frame = _CONSUMER_MESSAGE % (
        message_id,
        b64encode(payload),
        orjson.dumps(properties) if properties else b"{}",
        publish_time,
        redelivery_count,
    )
    if event_time is None and key is None:
        return frame
    parts = [frame[:-1]]
    if event_time is not None:
        parts.append(b',"eventTime":"%b"' % event_time)
    if key is not None:
        parts.append(b',"key":' + orjson.dumps(key))
    parts.append(b"}")
    return b"".join(parts)


def consumer_message_json(
    message_id: MessageId | str,
    payload: bytes,
    properties: Mapping[str, str],
    publish_time_ms: int,
    *,
    redelivery_count: int = 0,
    event_time_ms: int = 0,
    key: str | None = None,
    tz: tzinfo = UTC,
) -> bytes:
    """:func:`consumer_message_frame` given a message id and times in milliseconds."""
    encoded = message_id if isinstance(message_id, str) else message_id.to_base64()
    return consumer_message_frame(
        encoded.encode("ascii"),
        payload,
        properties,
        format_timestamp(publish_time_ms, tz).encode("ascii"),
        redelivery_count,
        format_timestamp(event_time_ms, tz).encode("ascii") if event_time_ms != 0 else None,
        key,
    )


def end_of_topic_json(end_of_topic: bool) -> bytes:
    return b'{"endOfTopic":true}' if end_of_topic else b'{"endOfTopic":false}'


# --- consumer / reader commands -----------------------------------------------------------------------------


class CommandType(Enum):
    ACK = "ack"
    NEGATIVE_ACK = "negativeAcknowledge"
    PERMIT = "permit"
    UNSUBSCRIBE = "unsubscribe"
    IS_END_OF_TOPIC = "isEndOfTopic"


_NAMED_TYPES = {t.value: t for t in CommandType if t is not CommandType.ACK}


@dataclass(frozen=True, slots=True)
class ConsumerCommand:
    type: CommandType
    message_id: MessageId | None = None
    message_id_text: str | None = None
    """The id exactly as the client sent it (Pulsar keys its batch-ack cache by this text)."""
    permit_messages: int | None = None


def _deserialize_error(message: str) -> WsSessionError:
    return WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, message)


_PLAIN_ACK_HEAD = '{"messageId":"'
_PLAIN_ACK_TAIL = '"}'


def plain_ack_fields(text: str) -> tuple[int, int, int, int, int] | None:
    """The fields ``(ledger, entry, partition, batch_index, batch_size)`` of an ack written exactly
    ``{"messageId":"<id>"}`` whose id this broker delivered (see
    :func:`magnetar.broker.wire.message_id.delivered_id_fields`);
    None for any other frame, which then goes through :func:`parse_consumer_command`. Such a frame is valid
    JSON meaning an individual ack of that id (a delivered id is plain base64), so the result is exactly the
    full parser's."""
    if text.startswith(_PLAIN_ACK_HEAD) and text.endswith(_PLAIN_ACK_TAIL):
        return delivered_id_fields(text[len(_PLAIN_ACK_HEAD) : -len(_PLAIN_ACK_TAIL)])
    return None


def plain_acks(
    messages: Sequence[str | bytes], start: int
) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """:func:`plain_ack_fields` of the frames from ``start`` on, up to the first that is not such an ack:
    their fields, and the index of that frame (``len(messages)`` when all are). One pass over a group of
    acks the client sent together; the frame it stops at goes through :func:`parse_consumer_command`."""
    head = _PLAIN_ACK_HEAD
    tail = _PLAIN_ACK_TAIL
    cut = len(_PLAIN_ACK_HEAD)
    fields_of = delivered_id_fields
    out: list[tuple[int, int, int, int, int]] = []
    for index in range(start, len(messages)):
        text = messages[index]
        if not (isinstance(text, str) and text.startswith(head) and text.endswith(tail)):
            return out, index
        fields = fields_of(text[cut : -len(tail)])
        if fields is None:
            return out, index
        out.append(fields)
    return out, len(messages)


def parse_consumer_command(text: str | bytes) -> ConsumerCommand:
    """Parse one consumer frame; :class:`WsSessionError` (code 3) when the session must be closed."""
    try:
        data = _load_object(text)
        type_text = _as_text(data.get("type"))
        command_type = _NAMED_TYPES.get(type_text or "", CommandType.ACK)
        if command_type is CommandType.PERMIT:
            return ConsumerCommand(command_type, permit_messages=_permits(data.get("permitMessages")))
        if command_type in (CommandType.ACK, CommandType.NEGATIVE_ACK):
            id_text = _as_text(data.get("messageId"))
            if id_text is None:
                raise _Coercion(f"Missing required messageId field for '{command_type.value}'")
            return ConsumerCommand(command_type, MessageId.from_base64(id_text), id_text)
        return ConsumerCommand(command_type)
    except (_Coercion, InvalidMessageIdError) as exc:
        raise _deserialize_error(str(exc)) from None


def _permits(value: Any) -> int:
    if value is None:
        raise _Coercion("Missing required permitMessages field for 'permit' command")
    permits = _as_long(value)
    if not INT32_MIN <= permits <= INT32_MAX:
        raise _Coercion(f"Numeric value ({permits}) out of range of int")
    if permits < 0:
        raise _Coercion(f"permitMessages must not be negative: {permits}")
    return permits


def parse_reader_command(text: str | bytes) -> bool:
    """A reader frame: True for ``isEndOfTopic``, False for anything else (an "ack" releasing the window).
    :class:`WsSessionError` (code 3) when it is not a JSON object."""
    try:
        data = _load_object(text)
        return _as_text(data.get("type")) == CommandType.IS_END_OF_TOPIC.value
    except _Coercion as exc:
        raise _deserialize_error(str(exc)) from None
