"""What a WebSocket upgrade asks for: the topic (and subscription) in its path, and its query parameters.

Paths (``AbstractWebSocketHandler.extractTopicName``, ``ConsumerHandler.extractSubscription``), v2 only:
``/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}``, ``/ws/v2/reader/...`` the same, and
``/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}``, where the domain is ``persistent``
or ``non-persistent``. The raw (percent-encoded) path is
split on ``/``; a producer/reader topic is every segment from the 8th on, joined with ``/`` (empty segments
dropped), a consumer path must have exactly 9 segments; topic and subscription are URL-decoded as Java's
``URLDecoder`` does (``+`` is a space). Names are checked as the admin API checks them
(:mod:`magnetar.broker.wire.topic_name`: no control characters, bounded lengths); a refused name is a 400, as
Pulsar answers an
upgrade whose topic name does not parse (``IllegalArgumentException``).

Query parameters are read as Pulsar's handlers read them (first value of each name) with Pulsar's defaults and
checks; numbers parse like Java's ``Integer.parseInt``/``Long.parseLong`` (ASCII sign and digits only,
:mod:`magnetar.broker.wire.strict_input`), the names a client gives (producer, consumer, reader, dead-letter
topic) hold no control or bidirectional formatting character, booleans like
``Boolean.parseBoolean`` (only ``true``, any case, is true), enums by exact constant name. Every failure is a
:class:`WsUpgradeError` 400 ``"Invalid query params: ..."``. ``receiverQueueSize`` is capped with
``min(value, 1000)`` and sets the push-mode window (``0`` means 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from magnetar.broker.protocols.ws_errors import UpgradeFailure, WsUpgradeError
from magnetar.broker.wire.errors import InvalidMessageIdError, InvalidTopicNameError
from magnetar.broker.wire.message_id import EARLIEST, LATEST, MessageId
from magnetar.broker.wire.strict_input import (
    NumberFormatError,
    UnsafeNameError,
    check_name_characters,
    parse_int,
    parse_long,
)
from magnetar.broker.wire.topic_name import TopicDomain, TopicName, check_subscription_name, url_decode

RECEIVER_QUEUE_SIZE_MAX = 1000
MIN_ACK_TIMEOUT_MS = 1000


class WsKind(Enum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    READER = "reader"


@dataclass(frozen=True, slots=True)
class WsTarget:
    kind: WsKind
    topic: TopicName
    subscription: str | None = None


def parse_ws_path(raw_path: str) -> WsTarget:
    """The topic (and subscription) of a ``/ws/v2/...`` path; :class:`WsUpgradeError` 400 when malformed."""
    parts = raw_path.split("/")
    try:
        if len(parts) < 8 or parts[1] != "ws" or parts[2] != "v2":
            raise InvalidTopicNameError("Invalid topic name format")
        try:
            kind = WsKind(parts[3])
        except ValueError:
            raise InvalidTopicNameError(f"Unknown WebSocket endpoint {parts[3]!r}") from None
        if parts[4] not in (TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT):
            raise InvalidTopicNameError(f"Invalid topic domain {parts[4]!r}")
        subscription = None
        end = len(parts)
        if kind is WsKind.CONSUMER:
            if len(parts) != 9:
                raise InvalidTopicNameError("Invalid topic name format")
            if not parts[8]:
                raise InvalidTopicNameError("Empty subscription name")
            subscription = url_decode(parts[8])
            check_subscription_name(subscription)
            end = 8
        local = "/".join([parts[7], *(p for p in parts[8:end] if p)])
        topic = TopicName(TopicDomain(parts[4]), parts[5], parts[6], url_decode(local))
    except InvalidTopicNameError as exc:
        raise WsUpgradeError.invalid(str(exc)) from None
    return WsTarget(kind, topic, subscription)


# --- Java-style scalar parsing ------------------------------------------------------------------------------


def java_int(name: str, text: str, bits: int = 32) -> int:
    """``Integer.parseInt`` (``bits=32``) / ``Long.parseLong`` (64): :func:`~.strict_input.parse_long`."""
    try:
        if bits == 32:
            return parse_int(name, text)
        return parse_long(name, text)
    except NumberFormatError as exc:
        raise WsUpgradeError.invalid(str(exc)) from None


def client_name(params: Mapping[str, str], key: str) -> str | None:
    """A name the client gives itself (``producerName``, ``consumerName``, ``readerName``): no control or
    bidirectional formatting character (:func:`~.strict_input.check_name_characters`)."""
    name = params.get(key)
    if name is not None:
        try:
            check_name_characters(key.removesuffix("Name") if key.endswith("Name") else key, name)
        except UnsafeNameError as exc:
            raise WsUpgradeError.invalid(str(exc)) from None
    return name


def java_bool(text: str | None) -> bool:
    """``Boolean.parseBoolean``: true only for "true", case-insensitively."""
    return text is not None and text.lower() == "true"


def _int_param(params: Mapping[str, str], name: str, default: int, low: int | None = None) -> int:
    text = params.get(name)
    if text is None:
        return default
    value = java_int(name, text)
    if low is not None and value < low:
        raise WsUpgradeError.invalid(f"{name} needs to be >= {low}")
    return value


def _enum_param(params: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    text = params.get(name)
    if text is None:
        return default
    if text not in allowed:
        raise WsUpgradeError.invalid(f"Invalid {name} {text}")
    return text


def _receiver_queue_size(params: Mapping[str, str]) -> int:
    size = _int_param(params, "receiverQueueSize", RECEIVER_QUEUE_SIZE_MAX)
    if size < 0:
        raise WsUpgradeError.invalid("receiverQueueSize needs to be >= 0")
    return min(size, RECEIVER_QUEUE_SIZE_MAX)


# --- producer -----------------------------------------------------------------------------------------------

ROUTING_MODES = ("SinglePartition", "RoundRobinPartition", "CustomPartition")
COMPRESSION_TYPES = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
HASHING_SCHEMES = ("JavaStringHash", "Murmur3_32Hash")


@dataclass(frozen=True, slots=True)
class ProducerParams:
    """``ProducerHandler.getProducerBuilder``'s parameters with their defaults."""

    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_ms: int = 30_000
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    max_pending_messages: int = 1000
    message_routing_mode: str = "SinglePartition"
    compression_type: str | None = None
    hashing_scheme: str | None = None
    token: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> ProducerParams:
        if params.get("encryptionKeys"):
            # Pulsar needs a CryptoKeyReader for this (IllegalStateException -> 500); Magnetar has none.
            raise WsUpgradeError.of(
                UpgradeFailure.OTHER,
                "Can't add encryption key without configuring cryptoKeyReaderFactoryClassName",
            )
        routing = _enum_param(params, "messageRoutingMode", ROUTING_MODES, "SinglePartition")
        initial = params.get("initialSequenceId")
        compression = params.get("compressionType")
        if compression is not None:
            _enum_param(params, "compressionType", COMPRESSION_TYPES, "NONE")
        hashing = params.get("hashingScheme")
        if hashing is not None:
            _enum_param(params, "hashingScheme", HASHING_SCHEMES, "JavaStringHash")
        return cls(
            producer_name=client_name(params, "producerName"),
            initial_sequence_id=None if initial is None else java_int("initialSequenceId", initial, 64),
            send_timeout_ms=_int_param(params, "sendTimeoutMillis", 30_000, low=0),
            batching_enabled=java_bool(params.get("batchingEnabled")),
            batching_max_messages=_int_param(params, "batchingMaxMessages", 1000, low=1),
            batching_max_publish_delay_ms=_int_param(params, "batchingMaxPublishDelay", 10, low=0),
            max_pending_messages=_int_param(params, "maxPendingMessages", 1000, low=0),
            # CustomPartition is accepted and ignored, as in Pulsar
            message_routing_mode="SinglePartition" if routing == "CustomPartition" else routing,
            compression_type=compression,
            hashing_scheme=hashing,
            token=params.get("token"),
        )


# --- consumer -----------------------------------------------------------------------------------------------

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
SUBSCRIPTION_MODES = ("Durable", "NonDurable")
CRYPTO_FAILURE_ACTIONS = ("FAIL", "DISCARD", "CONSUME")


def _crypto_failure_action(params: Mapping[str, str]) -> str | None:
    """An unknown action is ignored (Pulsar logs a warning and keeps the default)."""
    action = params.get("cryptoFailureAction")
    return action if action in CRYPTO_FAILURE_ACTIONS else None


@dataclass(frozen=True, slots=True)
class ConsumerParams:
    """``ConsumerHandler.getConsumerConfiguration``'s parameters with their defaults."""

    subscription_type: str = "Exclusive"
    subscription_mode: str = "Durable"
    receiver_queue_size: int = RECEIVER_QUEUE_SIZE_MAX
    ack_timeout_ms: int = 0
    consumer_name: str | None = None
    priority_level: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    max_redeliver_count: int | None = None
    dead_letter_topic: str | None = None
    pull_mode: bool = False
    crypto_failure_action: str | None = None
    token: str | None = None

    @property
    def max_pending_messages(self) -> int:
        """Push-mode window of unacknowledged deliveries (``receiverQueueSize``, 0 meaning 1); pull mode: 0,
        deliveries then need permits."""
        if self.pull_mode:
            return 0
        return self.receiver_queue_size or 1

    @classmethod
    def parse(cls, params: Mapping[str, str], topic: TopicName, subscription: str) -> ConsumerParams:
        ack_timeout = _int_param(params, "ackTimeoutMillis", 0)
        if ack_timeout != 0 and ack_timeout < MIN_ACK_TIMEOUT_MS:
            raise WsUpgradeError.invalid(f"Ack timeout should be greater than {MIN_ACK_TIMEOUT_MS} ms")
        max_redeliver = params.get("maxRedeliverCount")
        dead_letter = client_name(params, "deadLetterTopic")
        redeliver_count = None
        if max_redeliver is not None:
            redeliver_count = java_int("maxRedeliverCount", max_redeliver)
            if redeliver_count <= 0:
                raise WsUpgradeError.invalid("MaxRedeliverCount must be > 0.")
            if dead_letter is None:
                dead_letter = f"{topic}-{subscription}-DLQ"
        return cls(
            subscription_type=_enum_param(params, "subscriptionType", SUBSCRIPTION_TYPES, "Exclusive"),
            subscription_mode=_enum_param(params, "subscriptionMode", SUBSCRIPTION_MODES, "Durable"),
            receiver_queue_size=_receiver_queue_size(params),
            ack_timeout_ms=ack_timeout,
            consumer_name=client_name(params, "consumerName"),
            priority_level=_int_param(params, "priorityLevel", 0, low=0),
            negative_ack_redelivery_delay_ms=_int_param(params, "negativeAckRedeliveryDelay", 60_000, low=0),
            max_redeliver_count=redeliver_count,
            dead_letter_topic=dead_letter,
            pull_mode=java_bool(params.get("pullMode")),
            crypto_failure_action=_crypto_failure_action(params),
            token=params.get("token"),
        )


# --- reader -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReaderParams:
    """``ReaderHandler``'s parameters: ``messageId`` is ``earliest``, ``latest`` (default) or a base64 id."""

    start_message_id: MessageId = LATEST
    receiver_queue_size: int = RECEIVER_QUEUE_SIZE_MAX
    reader_name: str | None = None
    crypto_failure_action: str | None = None
    token: str | None = None

    @property
    def max_pending_messages(self) -> int:
        return self.receiver_queue_size or 1

    @property
    def start_is_earliest(self) -> bool:
        return self.start_message_id == EARLIEST

    @property
    def start_is_latest(self) -> bool:
        return self.start_message_id == LATEST

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> ReaderParams:
        text = params.get("messageId") or ""
        start = LATEST
        if text == "earliest":
            start = EARLIEST
        elif text.strip() and text != "latest":  # Pulsar: isNotBlank
            try:
                start = MessageId.from_base64(text)
            except InvalidMessageIdError as exc:
                raise WsUpgradeError.invalid(f"Invalid messageId {text}: {exc}") from None
        return cls(
            start_message_id=start,
            receiver_queue_size=_receiver_queue_size(params),
            reader_name=client_name(params, "readerName"),
            crypto_failure_action=_crypto_failure_action(params),
            token=params.get("token"),
        )
