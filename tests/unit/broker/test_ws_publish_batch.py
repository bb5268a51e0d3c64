"""The frames of one read parsed in one pass (``parse_publish_batch``) give what each frame parsed alone
gives: the same request, or the same ``send-error`` with the same reason and context, in frame order -
whatever the frames hold (hostile ones included)."""

from __future__ import annotations

import base64
import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.protocols.pulsar_ws.messages import (
    BINARY_PUBLISH_REASON,
    PublishError,
    PublishRequest,
    parse_publish_batch,
    parse_publish_request,
)
from magnetar.broker.protocols.ws_errors import WsErrorCode


def one_by_one(frames: list[str | bytes]) -> list[PublishRequest | tuple[WsErrorCode, str, str | None]]:
    out: list[PublishRequest | tuple[WsErrorCode, str, str | None]] = []
    for frame in frames:
        if isinstance(frame, bytes):
            out.append((WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, BINARY_PUBLISH_REASON, None))
            continue
        try:
            out.append(parse_publish_request(frame))
        except PublishError as exc:
            out.append((exc.code, exc.message, exc.context))
    return out


def batched(frames: list[str | bytes]) -> list[PublishRequest | tuple[WsErrorCode, str, str | None]]:
    return [
        (result.code, result.message, result.context) if isinstance(result, PublishError) else result
        for result in parse_publish_batch(frames)
    ]


def plain(payload: bytes, context: str) -> str:
    return orjson.dumps({"payload": base64.b64encode(payload).decode(), "context": context}).decode()


HOSTILE = [
    "",
    "{",
    "not json",
    "[]",
    "null",
    '"payload"',
    "{}",
    '{"payload":"aGk="}',
    '{"payload":"aGk=","context":"c"}',
    '{"payload":"aGk","context":"c"}',  # unpadded: Java's decoder takes it
    '{"payload":"aGk==","context":"c"}',
    '{"payload":"a","context":"c"}',
    '{"payload":"YWJj====","context":"c"}',
    '{"payload":"aGk=\\n","context":"c"}',
    '{"payload":"aGk=","context":1}',
    '{"payload":"aGk=","context":null}',
    '{"payload":"aGk=","context":["c"]}',
    '{"payload":"aGk=","context":"c","key":"k"}',
    '{"payload":"aGk=","context":"c","sequenceId":9223372036854775808}',
    '{"payload":"aGk=","context":"c","sequenceId":"\\u0661\\u0662"}',
    '{"payload":"aGk=","context":"c","eventTime":"yesterday"}',
    '{"payload":"aGk=","context":"c","properties":{"a":null}}',
    '{"payload":"aGk=","context":"\\u202e\\u0000\\u001b\\"\\\\"}',
    '{"payload":"aGk=","payload":"aGk=","context":"c"}',
    '{"payload":"\\u0061Gk=","context":"c"}',
    '{"payload":"aGk\\u003d","context":"c"}',
    '{"payload":"\u00e9Gk=","context":"c"}',
    '{"payload":{"x":1},"context":"c"}',
    '{"payload":1,"context":"c"}',
    '{"context":"c"}',
    '{"payload":"aGk=","context":"c"} ',
    '{"payload":"aGk=","context":"c"}{}',
    b'{"payload":"aGk=","context":"c"}',
    b"\x00\x01",
]


@pytest.mark.parametrize("frame", HOSTILE)
def test_each_hostile_frame_alone_is_answered_as_the_single_parser_answers(frame: str | bytes) -> None:
    assert batched([frame]) == one_by_one([frame])


def test_a_read_of_mixed_frames_keeps_their_order_and_answers() -> None:
    frames: list[str | bytes] = []
    for index, frame in enumerate(HOSTILE):
        frames.append(plain(bytes([index]) * index, str(index)))
        frames.append(frame)
    assert batched(frames) == one_by_one(frames)


def test_many_frames_in_one_read() -> None:
    frames: list[str | bytes] = [plain(bytes([i % 256]) * (i % 300), f"ctx-{i}") for i in range(20_000)]
    results = parse_publish_batch(frames)
    assert len(results) == len(frames)
    assert all(isinstance(result, PublishRequest) for result in results)
    assert batched(frames) == one_by_one(frames)


def test_a_plain_request_is_the_named_tuple_the_single_parser_builds() -> None:
    (request,) = parse_publish_batch(['{"payload":"aGk=","context":"7"}'])
    assert isinstance(request, PublishRequest)
    assert request == PublishRequest(b"hi", {}, "7")
    assert (request.key, request.event_time_ms, request.properties) == (None, 0, {})
    assert request._fields == PublishRequest._fields


def test_a_huge_payload_is_decoded() -> None:
    payload = bytes(range(256)) * 20_000  # 5 MB
    (request,) = parse_publish_batch([plain(payload, "big")])
    assert isinstance(request, PublishRequest)
    assert request.payload == payload


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
base64_texts = st.binary(max_size=64).map(lambda raw: base64.b64encode(raw).decode()) | st.text(
    alphabet="QUJDYWJj+/=\u00e9 \n-_", max_size=70
)
requests = st.fixed_dictionaries(
    {},
    optional={
        "payload": base64_texts | json_values,
        "context": st.text(max_size=10) | json_values,
        "key": st.text(max_size=4) | json_values,
        "sequenceId": st.integers() | st.text(max_size=4),
        "eventTime": st.just("2021-10-29T16:01:38.967-07:00") | st.text(max_size=6),
    },
)
frames_strategy = st.lists(
    requests.map(json.dumps) | st.text(max_size=12) | st.binary(max_size=8) | json_values.map(json.dumps),
    max_size=12,
)


@given(frames_strategy)
def test_any_read_is_parsed_as_its_frames_one_by_one(frames: list[str | bytes]) -> None:
    assert batched(frames) == one_by_one(frames)


def test_an_error_holds_no_traceback_of_the_parser() -> None:
    """A read of bad frames from a client that does not read its answers waits holding the parsed frames:
    an error is its code, reason and context only, not the parser's frames (a traceback and its context
    chain kept ~3 KB alive per bad frame)."""
    for result in parse_publish_batch(["{", '{"payload":"a"}', '{"payload":"aGk=","eventTime":"x"}', b""]):
        assert isinstance(result, PublishError)
        assert (result.__traceback__, result.__context__, result.__cause__) == (None, None, None)
