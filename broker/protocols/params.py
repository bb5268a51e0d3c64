"""What a WebSocket upgrade asks for: the topic (and subscription) in its path, and its query parameters.

Paths (``AbstractWebSocketHandler.extractTopicName``, ``ConsumerHandler.extractSubscription``), v2 only:
``/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}``, ``/ws/v2/reader/...`` the same, and
``/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}``, where the domain is ``persistent``
or ``non-persistent``. The raw (percent-encoded) path is
split on ``/``; a producer/reader topic is every segment from the 8th on, joined with ``/`` (empty segments
dropped), a consumer path must have exactly 9 segments; topic and subscription are URL-decoded as Java's
``URLDecoder`` does (``+`` is a space). Names are checked as the admin API checks them
(:mod:`magnetar.broker.wire.topic_name`: no control characters, bounded lengths). A malformed path or a
refused name is a 400 ``"Invalid WebSocket path: ..."`` that says what is wrong (a missing subscription, an
unknown endpoint or domain, a v1 path) and shows the path the endpoint expects (:data:`PATH_FORMS`), where
Pulsar says ``Invalid topic name format`` (as a 500: its path checks run outside its error mapping).

Query parameters are read as Pulsar's handlers read them (first value of each name) with Pulsar's defaults and
checks; numbers parse like Java's ``Integer.parseInt``/``Long.parseLong`` (ASCII sign and digits only,
:mod:`magnetar.broker.wire.strict_input`), the names a client gives (producer, consumer, reader, dead-letter
topic) hold no control or bidirectional formatting character, booleans like
``Boolean.parseBoolean`` (only ``true``, any case, is true), enums by exact constant name. Every failure is a
:class:`WsUpgradeError` 400 ``"Invalid query params: ..."``. ``receiverQueueSize`` is capped with
``min(value, 1000)`` and sets the push-mode window (``0`` means 1).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from magnetar.broker.protocols.ws_errors import UpgradeFailure, WsUpgradeError
from magnetar.broker.wire import (
    EARLIEST,
    LATEST,
    InvalidMessageIdError,
    InvalidTopicNameError,
    MessageId,
    NumberFormatError,
    TopicDomain,
    TopicName,
    UnsafeNameError,
    check_name_characters,
    check_subscription_name,
    parse_int,
    parse_long,
    url_decode,
)

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


PATH_FORMS = {
    WsKind.PRODUCER: "/ws/v2/producer/persistent/{tenant}/{namespace}/{topic}",
    WsKind.CONSUMER: "/ws/v2/consumer/persistent/{tenant}/{namespace}/{topic}/{subscription}",
    WsKind.READER: "/ws/v2/reader/persistent/{tenant}/{namespace}/{topic}",
}
"""Each endpoint's path, as a refusal shows it (``non-persistent`` in place of ``persistent`` too)."""
ALL_PATH_FORMS = "; ".join(PATH_FORMS.values())


def parse_ws_path(raw_path: str) -> WsTarget:
    """The topic (and subscription) of a ``/ws/v2/...`` path; :class:`WsUpgradeError` 400 when malformed.

    Each refusal names what is wrong (the missing subscription, an unknown endpoint or domain, a v1 path)
    and shows the path the endpoint expects (:data:`PATH_FORMS`): Pulsar's own checks say
    ``Invalid topic name format`` for all of them, which does not tell a newcomer what to change."""
    parts = raw_path.split("/")
    try:
        kind = _path_kind(parts)
        if parts[4] not in (TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT):
            raise InvalidTopicNameError(
                f"Invalid topic domain {parts[4]!r}: persistent or non-persistent; the {kind.value} path is "
                f"{PATH_FORMS[kind]}"
            )
        if len(parts) < 8:
            raise InvalidTopicNameError(
                f"Too few path segments (tenant, namespace or topic missing): the {kind.value} path is "
                f"{PATH_FORMS[kind]}"
            )
        if not "".join(parts[7:]):
            raise InvalidTopicNameError(f"Missing topic name: the {kind.value} path is {PATH_FORMS[kind]}")
        subscription = None
        end = len(parts)
        if kind is WsKind.CONSUMER:
            if len(parts) == 8 or (len(parts) == 9 and not parts[8]):
                raise InvalidTopicNameError(
                    f"Missing subscription name: the consumer path is {PATH_FORMS[kind]} (a reader needs "
                    f"no subscription: {PATH_FORMS[WsKind.READER]})"
                )
            if len(parts) != 9:
                raise InvalidTopicNameError(
                    f"Too many path segments for a consumer ({len(parts) - 4} after /ws/v2/consumer/, "
                    f"expected 5): the consumer path is {PATH_FORMS[kind]}; a '/' in a topic or "
                    f"subscription name is written %2F"
                )
            subscription = url_decode(parts[8])
            check_subscription_name(subscription)
            end = 8
        local = "/".join([parts[7], *(p for p in parts[8:end] if p)])
        topic = TopicName(TopicDomain(parts[4]), parts[5], parts[6], url_decode(local))
    except InvalidTopicNameError as exc:
        raise WsUpgradeError.invalid_path(str(exc)) from None
    return WsTarget(kind, topic, subscription)


def _path_kind(parts: list[str]) -> WsKind:
    """The endpoint of a path split on ``/``, with at least its domain segment; else a refusal that says
    which part of the path is wrong."""
    if len(parts) < 3 or parts[1] != "ws":
        raise InvalidTopicNameError(f"Not a WebSocket API path: the paths are {ALL_PATH_FORMS}")
    if parts[2] != "v2":
        if parts[2] in {kind.value for kind in WsKind}:
            raise InvalidTopicNameError(
                f"Only the v2 WebSocket paths are served (/ws/v2/{parts[2]}/..., not /ws/{parts[2]}/...): "
                f"{PATH_FORMS[WsKind(parts[2])]}"
            )
        raise InvalidTopicNameError(
            f"Unknown WebSocket API version {parts[2]!r}: the paths are {ALL_PATH_FORMS}"
        )
    endpoint = parts[3] if len(parts) > 3 else ""
    try:
        kind = WsKind(endpoint)
    except ValueError:
        raise InvalidTopicNameError(
            f"Unknown WebSocket endpoint {endpoint!r} (producer, consumer or reader): the paths are "
            f"{ALL_PATH_FORMS}"
        ) from None
    if len(parts) < 5 or not parts[4]:
        raise InvalidTopicNameError(f"Missing topic: the {kind.value} path is {PATH_FORMS[kind]}")
    return kind


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
        if "encryptionKeys" in params:
            raise WsUpgradeError.of(UpgradeFailure.OTHER, encryption_refusal(params["encryptionKeys"]))
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


ENCRYPTION_REFUSAL = "Can't add encryption key without configuring cryptoKeyReaderFactoryClassName"
"""Pulsar's answer (500) to ``encryptionKeys`` when its WebSocket service has no key reader."""


def encryption_refusal(value: str) -> str:
    """Why a producer with ``encryptionKeys`` is refused (a 500, as Pulsar answers it without a key reader).

    Pulsar's WebSocket producer takes the parameter in two forms. A comma-separated list of key names asks
    the service to encrypt each message (needs ``cryptoKeyReaderFactoryClassName``, else
    :data:`ENCRYPTION_REFUSAL`, an ``IllegalStateException``: 500). A base64 JSON object of named keys whose
    values carry ``keyValue`` (Pulsar 3.x) declares client-side encryption: the payloads arrive encrypted
    and the service stores the keys and each message's ``encryptionParam`` in the message metadata, with
    batching and compression off. Magnetar has no key reader and stores no encryption metadata, so both
    forms are refused with Pulsar's status; the reason keeps Pulsar's words and says what to do."""
    form = "client-side encryption (a base64 JSON map of keys)" if _is_key_map(value) else "encryption"
    return (
        f"{ENCRYPTION_REFUSAL}: Magnetar has no such setting and does not support {form}; "
        "publish without encryptionKeys (encrypt payloads in the application if needed)"
    )


def _is_key_map(value: str) -> bool:
    """The client-side form: base64 of a JSON object whose first value has a ``keyValue``."""
    try:
        decoded = json.loads(base64.b64decode(value.strip(), validate=True))
    except (ValueError, binascii.Error):
        return False
    if not isinstance(decoded, dict) or not decoded:
        return False
    first = next(iter(decoded.values()))
    return isinstance(first, dict) and first.get("keyValue") is not None


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
