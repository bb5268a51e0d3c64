"""The JSON consumer's ``ConsumerMessage`` frames, written from a template on the dispatch hot path, are
byte for byte the compact JSON of the same object (field order and escaping as ``test_ws_protocol.py``
checks against Pulsar's Jackson output), and every delivered id is remembered for the ack fast path."""

from __future__ import annotations

import base64
from typing import Any, cast

import orjson
import trio
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl
from magnetar.broker.protocols.pulsar_ws.session_io import JsonFrames
from magnetar.broker.wire.date_format import format_timestamp
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.broker.wire.message_id import MessageId, delivered_id_fields

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
"""Text a stored message can hold: decoded UTF-8, so no lone surrogates."""
_millis = st.integers(0, 2**42)


class _Recorder:
    """Takes what :meth:`OutboundFrames.run` sends, then closes the queue so that ``run`` returns."""

    def __init__(self, frames: JsonFrames) -> None:
        self.frames = frames
        self.sent: list[bytes] = []

    async def send_many(self, batch: list[bytes], *, text: bool, now: bool = False) -> None:
        assert text
        self.sent.extend(batch)
        self.frames.close()


def _sent_frames(frames: JsonFrames) -> list[bytes]:
    recorder = _Recorder(frames)
    trio.run(frames.run, cast(Any, recorder))
    return recorder.sent


@given(
    payload=st.binary(max_size=300),
    properties=st.one_of(st.none(), st.dictionaries(_text, _text, max_size=3)),
    publish_time_ms=_millis,
    event_time_ms=st.one_of(st.just(0), _millis),
    key=st.one_of(st.none(), _text),
    redelivery_count=st.integers(0, 1000),
    position=st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
    partition=st.integers(-1, 100),
    batch=st.one_of(
        st.just((-1, 0)),
        st.integers(1, 20_000).flatmap(lambda size: st.tuples(st.integers(0, size - 1), st.just(size))),
    ),
)
def test_a_pushed_message_is_the_reference_consumer_message_and_its_id_is_remembered(
    payload: bytes,
    properties: dict[str, str] | None,
    publish_time_ms: int,
    event_time_ms: int,
    key: str | None,
    redelivery_count: int,
    position: tuple[int, int],
    partition: int,
    batch: tuple[int, int],
) -> None:
    frames = JsonFrames()
    consumer = Consumer(
        name="c",
        priority_level=0,
        partition=partition,
        flow=FlowControl(10, pull_mode=False),
        sink=frames,
    )
    if properties is None:
        message = StoredMessage(payload, "p", 0, publish_time_ms, event_time_ms, key)  # default: read-only {}
    else:
        message = StoredMessage(payload, "p", 0, publish_time_ms, event_time_ms, key, properties)
    ledger_id, entry_id = position
    batch_index, batch_size = batch
    consumer.push(Delivery(ledger_id, entry_id, batch_index, batch_size, message), redelivery_count, 0.0)

    message_id = MessageId(ledger_id, entry_id, partition, batch_index, batch_size).to_base64()
    expected: dict[str, object] = {
        "messageId": message_id,
        "payload": base64.b64encode(payload).decode("ascii"),
        "properties": properties or {},
        "publishTime": format_timestamp(publish_time_ms),
        "redeliveryCount": redelivery_count,
    }
    if event_time_ms != 0:
        expected["eventTime"] = format_timestamp(event_time_ms)
    if key is not None:
        expected["key"] = key
    assert _sent_frames(frames) == [orjson.dumps(expected)]
    assert delivered_id_fields(message_id) == (ledger_id, entry_id, partition, batch_index, batch_size)
