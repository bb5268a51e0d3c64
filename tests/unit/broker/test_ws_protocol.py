"""Pulsar WebSocket API formats: upgrade paths and query params, publish/consumer frames, error codes."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.protocols.params import (
    ConsumerParams,
    ProducerParams,
    ReaderParams,
    WsKind,
    parse_ws_path,
)
from magnetar.broker.protocols.pulsar_ws.messages import (
    CommandType,
    PublishError,
    consumer_message_json,
    end_of_topic_json,
    parse_consumer_command,
    parse_publish_request,
    parse_reader_command,
    producer_ack_error,
    producer_ack_ok,
)
from magnetar.broker.protocols.ws_errors import (
    UPGRADE_FAILURE_STATUS,
    UpgradeFailure,
    WsErrorCode,
    WsSessionError,
    WsUpgradeError,
    close_reason,
)
from magnetar.broker.wire.message_id import EARLIEST, LATEST, MessageId
from magnetar.broker.wire.topic_name import parse_topic_name

# --- paths -----------------------------------------------------------------------------------------------


def test_producer_reader_and_consumer_paths() -> None:
    producer = parse_ws_path("/ws/v2/producer/persistent/my-tenant/my-ns/my%20topic")
    assert producer.kind is WsKind.PRODUCER
    assert str(producer.topic) == "persistent://my-tenant/my-ns/my topic"
    assert producer.subscription is None
    reader = parse_ws_path("/ws/v2/reader/persistent/t/ns/x+y")
    assert reader.kind is WsKind.READER
    assert reader.topic.local_name == "x y"  # URLDecoder: '+' is a space
    consumer = parse_ws_path("/ws/v2/consumer/persistent/t/ns/topic/my%2Dsub")
    assert consumer.kind is WsKind.CONSUMER
    assert consumer.subscription == "my-sub"
    assert consumer.topic == parse_topic_name("t/ns/topic")


@pytest.mark.parametrize(
    "path",
    [
        "/ws/v2/producer/persistent/t/ns",  # too short
        "/ws/producer/persistent/t/c/ns/topic",  # v1
        "/ws/v2/consumer/persistent/t/ns/topic/",  # empty subscription
        "/ws/v2/consumer/persistent/t/ns/a/b/sub",  # consumer needs exactly 9 segments
        "/ws/v2/producer/persistent/t/ns/a/b",  # a slash in the topic reads as a v1 name
        "/ws/v2/producer/kafka/t/ns/topic",
        "/ws/v2/pusher/persistent/t/ns/topic",
        "/ws/v2/producer/persistent/bad tenant/ns/topic",
        "/ws/v2/producer/persistent/t/ns/%zz",
        "/api/v2/producer/persistent/t/ns/topic",
    ],
)
def test_malformed_paths_are_400(path: str) -> None:
    with pytest.raises(WsUpgradeError) as err:
        parse_ws_path(path)
    assert err.value.status == 400
    assert err.value.reason.startswith("Invalid WebSocket path: ")


def test_non_persistent_paths_parse() -> None:
    target = parse_ws_path("/ws/v2/consumer/non-persistent/t/ns/topic/sub")
    assert str(target.topic) == "non-persistent://t/ns/topic"
    assert target.subscription == "sub"
    assert not target.topic.is_persistent


# --- query params ----------------------------------------------------------------------------------------


def test_producer_defaults_and_values() -> None:
    assert ProducerParams.parse({}) == ProducerParams()
    assert ProducerParams().batching_enabled is False
    params = ProducerParams.parse(
        {
            "producerName": "p1",
            "initialSequenceId": "9000000000",
            "sendTimeoutMillis": "+5000",
            "batchingEnabled": "TRUE",
            "batchingMaxMessages": "10",
            "maxPendingMessages": "0",
            "messageRoutingMode": "CustomPartition",
            "compressionType": "LZ4",
            "hashingScheme": "Murmur3_32Hash",
        }
    )
    assert params.producer_name == "p1"
    assert params.initial_sequence_id == 9_000_000_000
    assert params.send_timeout_ms == 5000
    assert params.batching_enabled is True
    assert params.message_routing_mode == "SinglePartition"  # CustomPartition is ignored, as in Pulsar
    assert params.compression_type == "LZ4"
    assert ProducerParams.parse({"batchingEnabled": "yes"}).batching_enabled is False


@pytest.mark.parametrize(
    "query",
    [
        {"sendTimeoutMillis": "abc"},
        {"sendTimeoutMillis": "-1"},
        {"sendTimeoutMillis": "2147483648"},
        {"sendTimeoutMillis": "1.5"},
        {"batchingMaxMessages": "0"},
        {"maxPendingMessages": "-5"},
        {"messageRoutingMode": "roundrobin"},
        {"compressionType": "BROTLI"},
        {"hashingScheme": "md5"},
        {"initialSequenceId": "9223372036854775808"},
    ],
)
def test_invalid_producer_params_are_400(query: dict[str, str]) -> None:
    with pytest.raises(WsUpgradeError) as err:
        ProducerParams.parse(query)
    assert err.value.status == 400
    assert err.value.reason.startswith("Invalid query params: ")


def test_encryption_needs_a_key_reader_magnetar_does_not_have() -> None:
    with pytest.raises(WsUpgradeError) as err:
        ProducerParams.parse({"encryptionKeys": "k1,k2"})
    assert err.value.status == 500
    assert "cryptoKeyReaderFactoryClassName" in err.value.reason


TOPIC = parse_topic_name("t/ns/orders")


def test_consumer_defaults_caps_and_window() -> None:
    params = ConsumerParams.parse({}, TOPIC, "sub")
    assert params.subscription_type == "Exclusive"
    assert params.subscription_mode == "Durable"
    assert params.receiver_queue_size == 1000
    assert params.max_pending_messages == 1000
    assert params.negative_ack_redelivery_delay_ms == 60_000
    assert ConsumerParams.parse({"receiverQueueSize": "5000"}, TOPIC, "s").receiver_queue_size == 1000
    assert ConsumerParams.parse({"receiverQueueSize": "0"}, TOPIC, "s").max_pending_messages == 1
    pull = ConsumerParams.parse({"pullMode": "true", "receiverQueueSize": "10"}, TOPIC, "s")
    assert pull.pull_mode
    assert pull.max_pending_messages == 0
    dlq = ConsumerParams.parse({"maxRedeliverCount": "3"}, TOPIC, "sub")
    assert dlq.dead_letter_topic == "persistent://t/ns/orders-sub-DLQ"
    custom = ConsumerParams.parse({"maxRedeliverCount": "3", "deadLetterTopic": "dead"}, TOPIC, "sub")
    assert custom.dead_letter_topic == "dead"
    assert ConsumerParams.parse({"cryptoFailureAction": "nope"}, TOPIC, "s").crypto_failure_action is None
    shared = ConsumerParams.parse({"subscriptionType": "Key_Shared", "ackTimeoutMillis": "1000"}, TOPIC, "s")
    assert shared.subscription_type == "Key_Shared"
    assert shared.ack_timeout_ms == 1000


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ({"subscriptionType": "shared"}, "Invalid query params: Invalid subscriptionType shared"),
        ({"subscriptionMode": "Forever"}, "Invalid query params: Invalid subscriptionMode Forever"),
        ({"receiverQueueSize": "-1"}, "Invalid query params: receiverQueueSize needs to be >= 0"),
        (
            {"receiverQueueSize": "x"},
            'Invalid query params: Invalid receiverQueueSize "x": not a decimal integer '
            "(an optional sign and ASCII digits only)",
        ),
        ({"ackTimeoutMillis": "999"}, "Invalid query params: Ack timeout should be greater than 1000 ms"),
        ({"maxRedeliverCount": "0"}, "Invalid query params: MaxRedeliverCount must be > 0."),
        ({"priorityLevel": "-1"}, "Invalid query params: priorityLevel needs to be >= 0"),
    ],
)
def test_invalid_consumer_params(query: dict[str, str], reason: str) -> None:
    with pytest.raises(WsUpgradeError) as err:
        ConsumerParams.parse(query, TOPIC, "sub")
    assert (err.value.status, err.value.reason) == (400, reason)


def test_reader_params() -> None:
    assert ReaderParams.parse({}).start_message_id == LATEST
    assert ReaderParams.parse({"messageId": "  "}).start_is_latest
    assert ReaderParams.parse({"messageId": "earliest"}).start_message_id == EARLIEST
    assert ReaderParams.parse({"messageId": "latest"}).start_is_latest
    assert ReaderParams.parse({"messageId": "CAAQAw=="}).start_message_id == MessageId(0, 3)
    assert ReaderParams.parse({"receiverQueueSize": "0"}).max_pending_messages == 1
    assert ReaderParams.parse({"receiverQueueSize": "2000"}).receiver_queue_size == 1000
    with pytest.raises(WsUpgradeError) as err:
        ReaderParams.parse({"messageId": "not-an-id"})
    assert err.value.status == 400


def test_upgrade_failure_table_and_reasons() -> None:
    assert {f: UPGRADE_FAILURE_STATUS[f] for f in UpgradeFailure} == {
        UpgradeFailure.INVALID_ARGUMENT: 400,
        UpgradeFailure.AUTHENTICATION: 401,
        UpgradeFailure.AUTHORIZATION: 403,
        UpgradeFailure.NOT_FOUND: 404,
        UpgradeFailure.BUSY: 409,
        UpgradeFailure.TOO_MANY_REQUESTS: 429,
        UpgradeFailure.QUOTA_EXCEEDED_OR_TERMINATED: 503,
        UpgradeFailure.TIMEOUT: 504,
        UpgradeFailure.OTHER: 500,
    }
    busy = WsUpgradeError.of(UpgradeFailure.BUSY, "Producer with name 'p' is already connected")
    assert busy.reason == "Failed to create producer/consumer: Producer with name 'p' is already connected"
    assert WsUpgradeError.of(UpgradeFailure.AUTHENTICATION, "x").reason == "Failed to authenticate"
    assert WsUpgradeError.of(UpgradeFailure.AUTHORIZATION, "x").reason == "Not authorized"


def test_close_codes_are_4000_plus_pulsars_code() -> None:
    assert [c.close_code for c in WsErrorCode] == list(range(4001, 4009))
    assert WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON.send_error == "send-error:3"
    assert WsErrorCode.PAYLOAD_ENCODING_ERROR.description == "Invalid payload encoding"
    assert close_reason(WsErrorCode.UNKNOWN_ERROR) == "Unknown error"
    assert close_reason(WsErrorCode.UNKNOWN_ERROR, "boom") == "Unknown error: boom"
    assert len(close_reason(WsErrorCode.UNKNOWN_ERROR, "é" * 200).encode()) <= 123
    error = WsSessionError(WsErrorCode.FAILED_TO_SUBSCRIBE, "topic gone")
    assert (error.close_code, error.reason) == (4002, "Failed to subscribe: topic gone")


# --- publish requests ------------------------------------------------------------------------------------


def test_full_publish_request() -> None:
    request = parse_publish_request(
        '{"payload":"SGVsbG8gV29ybGQ=","properties":{"key1":"value1","n":5},"context":"1","key":"k",'
        '"replicationClusters":["c1"],"eventTime":"2021-10-29T16:01:38.967-07:00","deliverAt":"7",'
        '"deliverAfterMs":100.9,"sequenceId":42,"disableReplication":true,"unknownField":{"x":1}}'
    )
    assert request.payload == b"Hello World"
    assert request.properties == {"key1": "value1", "n": "5"}
    assert request.context == "1"
    assert request.key == "k"
    assert request.replication_clusters == ("c1",)
    assert request.event_time_ms == 1635548498967
    assert (request.deliver_at_ms, request.deliver_after_ms, request.sequence_id) == (7, 100, 42)
    assert request.disable_replication is True


def test_minimal_publish_request_and_scalar_coercion() -> None:
    request = parse_publish_request(b'{"payload":"","context":12}')
    assert request.payload == b""
    assert request.properties == {}
    assert request.context == "12"
    assert request.key is None
    assert request.event_time_ms == 0


@pytest.mark.parametrize(
    ("frame", "code", "context"),
    [
        ("not json", 3, None),
        ("[1,2]", 3, None),
        ('{"payload":"aGk=","context":"c","properties":[1]}', 3, None),
        ('{"payload":"aGk=","context":"c","deliverAt":"soon"}', 3, None),
        ('{"payload":{"a":1},"context":"c"}', 3, None),
        ('{"context":"c"}', 7, "c"),
        ('{"payload":null,"context":"c"}', 7, "c"),
        ('{"payload":"not base64!","context":"c"}', 7, "c"),
        ('{"payload":"aGk","context":"c","eventTime":"yesterday"}', 7, "c"),
        ('{"payload":"aGk=","eventTime":"2021-10-29T16:01:38"}', 7, None),
    ],
)
def test_publish_errors_map_to_pulsars_send_errors(frame: str, code: int, context: str | None) -> None:
    with pytest.raises(PublishError) as err:
        parse_publish_request(frame)
    assert int(err.value.code) == code
    assert err.value.context == context
    ack = orjson.loads(err.value.ack_json())
    assert ack["result"] == f"send-error:{code}"
    assert ("context" in ack) == (context is not None)
    assert ack["errorCode"] == 0


def test_base64_error_message() -> None:
    with pytest.raises(PublishError) as err:
        parse_publish_request('{"payload":"a"}')
    assert err.value.message.startswith("Invalid Base64 message-payload error=")


# --- outbound frames -------------------------------------------------------------------------------------


def test_producer_ack_bytes_match_jackson() -> None:
    assert producer_ack_ok(MessageId(0, 3), "1") == (
        b'{"result":"ok","messageId":"CAAQAzAA","context":"1","errorCode":0,"schemaVersion":0}'
    )
    assert producer_ack_ok("CAAQAw==", None) == (
        b'{"result":"ok","messageId":"CAAQAw==","errorCode":0,"schemaVersion":0}'
    )
    assert producer_ack_error(WsErrorCode.UNKNOWN_ERROR, "TimeoutException", "1") == (
        b'{"result":"send-error:8","errorMsg":"TimeoutException","context":"1","errorCode":0,"schemaVersion":0}'
    )


@given(
    st.builds(
        MessageId, st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 9), st.integers(-1, 99)
    ),
    st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)),
)
def test_producer_acks_from_the_template_are_what_a_json_encoder_writes(
    message_id: MessageId, context: str | None
) -> None:
    """The template's output for any id and context (quotes, backslashes, controls, non-ASCII) is the
    compact JSON of the same object, whichever form the id is given in."""
    ack: dict[str, object] = {"result": "ok", "messageId": message_id.to_base64()}
    if context is not None:
        ack["context"] = context
    ack |= {"errorCode": 0, "schemaVersion": 0}
    expected = json.dumps(ack, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text = message_id.to_base64()
    for form in (message_id, text, text.encode("ascii")):
        assert producer_ack_ok(form, context) == expected


def test_consumer_message_bytes_match_jackson() -> None:
    frame = consumer_message_json(MessageId(3, 0), b"hello", {}, 1635548498967)
    assert frame == (
        b'{"messageId":"CAMQADAA","payload":"aGVsbG8=","properties":{},'
        b'"publishTime":"2021-10-29T23:01:38.967Z","redeliveryCount":0}'
    )
    full = orjson.loads(
        consumer_message_json(
            "CAMQADAA", b"", {"a": "b"}, 0, redelivery_count=2, event_time_ms=900, key="k\u00e9"
        )
    )
    assert list(full) == [
        "messageId",
        "payload",
        "properties",
        "publishTime",
        "redeliveryCount",
        "eventTime",
        "key",
    ]
    assert full["eventTime"] == "1970-01-01T00:00:00.9Z"
    assert full["key"] == "ké"
    assert end_of_topic_json(True) == b'{"endOfTopic":true}'
    assert end_of_topic_json(False) == b'{"endOfTopic":false}'


# --- consumer commands -----------------------------------------------------------------------------------


def test_consumer_commands() -> None:
    ack = parse_consumer_command('{"messageId":"CAAQAw=="}')
    assert (ack.type, ack.message_id, ack.message_id_text) == (CommandType.ACK, MessageId(0, 3), "CAAQAw==")
    assert parse_consumer_command('{"type":"whatever","messageId":"CAAQAw=="}').type is CommandType.ACK
    nack = parse_consumer_command('{"type":"negativeAcknowledge","messageId":"CAMQADAA"}')
    assert (nack.type, nack.message_id) == (CommandType.NEGATIVE_ACK, MessageId(3, 0))
    permit = parse_consumer_command('{"type":"permit","permitMessages":100}')
    assert (permit.type, permit.permit_messages) == (CommandType.PERMIT, 100)
    assert parse_consumer_command('{"type":"unsubscribe"}').type is CommandType.UNSUBSCRIBE
    assert parse_consumer_command('{"type":"isEndOfTopic"}').type is CommandType.IS_END_OF_TOPIC


@pytest.mark.parametrize(
    "frame",
    [
        "{not json",
        '"just a string"',
        '{"type":"permit"}',
        '{"type":"permit","permitMessages":"many"}',
        '{"type":"permit","permitMessages":4294967296}',
        '{"type":"permit","permitMessages":-5}',
        '{"type":"permit","permitMessages":"-1"}',
        "{}",
        '{"messageId":"@@@"}',
        '{"type":"negativeAcknowledge","messageId":"CAA="}',
    ],
)
def test_malformed_consumer_commands_close_with_code_3(frame: str) -> None:
    with pytest.raises(WsSessionError) as err:
        parse_consumer_command(frame)
    assert err.value.code is WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON
    assert err.value.close_code == 4003


def test_a_negative_permit_is_refused_with_a_reason_that_names_it() -> None:
    with pytest.raises(WsSessionError, match="permitMessages must not be negative: -5"):
        parse_consumer_command('{"type":"permit","permitMessages":-5}')
    assert parse_consumer_command('{"type":"permit","permitMessages":0}').permit_messages == 0


def test_reader_commands() -> None:
    assert parse_reader_command('{"type":"isEndOfTopic"}') is True
    assert parse_reader_command('{"messageId":"CAAQAw=="}') is False
    with pytest.raises(WsSessionError):
        parse_reader_command("nope")
