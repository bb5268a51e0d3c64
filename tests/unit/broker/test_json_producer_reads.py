"""The Pulsar JSON producer's handler of one read (``PulsarWsAdapter.producer``), without a network: what it
publishes, where it waits - for room among the session's pending messages, for the client to read answers
that fill the outbound queue - and when it asks the refusal (rate limits, backlog quotas); and its
acknowledgements, written per entry, byte for byte what the JSON encoder writes."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.runtime import TrioClock
from magnetar.broker.core import Capacity, Producer, PublishRequest
from magnetar.broker.protocols.adapter import ProducerSession
from magnetar.broker.protocols.pulsar_ws.adapter import PARSED_FRAMES_MAX, PulsarWsAdapter
from magnetar.broker.protocols.pulsar_ws.messages import producer_ack_ok
from magnetar.broker.protocols.pulsar_ws.session_io import JsonAcks, JsonFrames
from magnetar.broker.wire import MessageId, encode_message_id


class HeldTopic:
    """The producer's target: keeps every request, stores one when the test says so."""

    def __init__(self) -> None:
        self.requests: list[PublishRequest] = []

    def publish(self, request: PublishRequest) -> None:
        self.requests.append(request)

    def store_first(self) -> None:
        request = self.requests.pop(0)
        request.producer.on_stored(request, 5, len(self.requests), -1, 0)


class Refusal:
    def __init__(self, answer: str | None) -> None:
        self.asked = 0
        self.answer = answer

    async def __call__(self, messages: int) -> str | None:
        self.asked += messages
        await trio.lowlevel.checkpoint()
        return self.answer


def request(index: int) -> str:
    return json.dumps({"payload": base64.b64encode(b"m%d" % index).decode(), "context": str(index)})


def handler(
    topic: HeldTopic,
    frames: JsonFrames,
    *,
    pending: int = 100,
    refusal: Refusal | None = None,
    unrestricted: bool = True,
) -> tuple[Any, Capacity]:
    capacity = Capacity(pending)
    producer = Producer(topic, "p", capacity, partition=-1, clock=TrioClock())
    session = ProducerSession(
        frames=frames,
        publisher=producer,
        capacity=capacity,
        refusal=refusal or Refusal(None),
        batch_messages_max=1000,
        batch_bytes_max=1 << 20,
        unrestricted=lambda: unrestricted,
    )
    return PulsarWsAdapter().producer(session), capacity


def answers(frames: JsonFrames) -> list[dict[str, Any]]:
    return [json.loads(frame) for frame in cast(Any, frames)._frames]


async def test_a_read_is_published_in_order_and_acked_with_its_contexts() -> None:
    topic = HeldTopic()
    frames = JsonFrames()
    on_frames, _ = handler(topic, frames)
    await on_frames([request(i) for i in range(5)])
    assert [r.tag for r in topic.requests] == ["0", "1", "2", "3", "4"]
    assert [r.content.payload for r in topic.requests] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert len({r.received_at for r in topic.requests}) == 1  # one read, one arrival time
    for _ in range(5):
        topic.store_first()
    assert [a["context"] for a in answers(frames)] == ["0", "1", "2", "3", "4"]
    assert {a["result"] for a in answers(frames)} == {"ok"}


async def test_a_read_longer_than_one_parse_keeps_its_order() -> None:
    topic = HeldTopic()
    frames = JsonFrames()
    on_frames, _ = handler(topic, frames, pending=10_000)
    count = 3 * PARSED_FRAMES_MAX + 7
    batch: list[str | bytes] = [request(i) if i % 3 else "{bad" for i in range(count)]
    await on_frames(batch)
    assert [r.tag for r in topic.requests] == [str(i) for i in range(count) if i % 3]
    assert [a["result"] for a in answers(frames)] == ["send-error:3"] * len(range(0, count, 3))


async def test_the_read_waits_for_room_among_pending_messages() -> None:
    topic = HeldTopic()
    frames = JsonFrames()
    on_frames, capacity = handler(topic, frames, pending=2)
    done = trio.Event()

    async def run() -> None:
        await on_frames([request(i) for i in range(5)])
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        assert (len(topic.requests), capacity.count, done.is_set()) == (2, 2, False)
        topic.store_first()
        await trio.testing.wait_all_tasks_blocked()
        assert (len(topic.requests), capacity.count) == (2, 2)
        for _ in range(3):
            topic.store_first()
            await trio.testing.wait_all_tasks_blocked()
        assert done.is_set()
    assert [a["context"] for a in answers(frames)] == ["0", "1", "2", "3"]


class SlowSocket:
    """Stands in for the WebSocket: takes a batch only when the test lets it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.gate = trio.Event()

    async def send_many(self, batch: list[bytes], *, text: bool, now: bool = False) -> None:
        await self.gate.wait()
        self.gate = trio.Event()
        self.sent.extend(batch)


async def test_answers_that_fill_the_outbound_queue_stop_the_read_until_the_client_reads() -> None:
    topic = HeldTopic()
    frames = JsonFrames(messages_max=2)
    on_frames, _ = handler(topic, frames)
    socket = SlowSocket()
    done = trio.Event()
    batch: list[str | bytes] = ["{bad", b"\x00", request(2), "[]", request(4)]

    async def run() -> None:
        await on_frames(batch)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(frames.run, cast(Any, socket))
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        # two errors answered: the queue is full, the third frame is not read yet
        assert (frames.messages, len(topic.requests), done.is_set()) == (2, 0, False)
        socket.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        socket.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert done.is_set()
        assert [r.tag for r in topic.requests] == ["2", "4"]
        nursery.cancel_scope.cancel()
    assert [json.loads(a)["result"] for a in socket.sent] == ["send-error:3"] * 3


async def test_the_refusal_is_asked_per_message_while_a_limit_may_apply() -> None:
    topic = HeldTopic()
    frames = JsonFrames()
    limited = Refusal("Too many messages")
    on_frames, _ = handler(topic, frames, refusal=limited, unrestricted=False)
    await on_frames([request(i) for i in range(3)])
    assert (limited.asked, topic.requests) == (3, [])
    refused = [("send-error:8", str(i)) for i in range(3)]
    assert [(a["result"], a["context"]) for a in answers(frames)] == refused

    free = Refusal("never asked")
    on_frames, _ = handler(topic, JsonFrames(), refusal=free, unrestricted=True)
    await on_frames([request(i) for i in range(3)])
    assert (free.asked, len(topic.requests)) == (0, 3)


class Tagged:
    def __init__(self, tag: str | None) -> None:
        self.tag = tag


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**63 - 1),
            st.integers(-1, 2**31 - 1),
            st.integers(-1, 70_000),
            st.integers(0, 70_000),
            st.none() | st.text(max_size=12),
        ),
        min_size=1,
        max_size=6,
    ).map(lambda acks: acks + acks[-1:])  # the same entry twice in a row: the parts built once
)
def test_acks_of_an_entry_are_those_a_json_encoder_writes(
    acks: list[tuple[int, int, int, int, int, str | None]],
) -> None:
    frames = JsonFrames()
    writer = JsonAcks(frames)
    for ledger_id, entry_id, partition, index, size, context in acks:
        writer.stored(cast(Any, Tagged(context)), partition, ledger_id, entry_id, index, size)
    expected = [
        producer_ack_ok(encode_message_id(ledger_id, entry_id, partition, index, size), context)
        for ledger_id, entry_id, partition, index, size, context in acks
    ]
    assert list(cast(Any, frames)._frames) == expected
    for frame, (ledger_id, entry_id, partition, index, size, context) in zip(expected, acks, strict=True):
        ack = json.loads(frame)
        stored = MessageId(ledger_id, entry_id, partition, index, size)
        assert MessageId.from_base64(ack["messageId"]) == stored
        assert ack.get("context") == context
