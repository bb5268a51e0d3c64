"""Producer access modes in the core (a topic's producer registry), as Pulsar's broker decides them: who
may publish at once, the topic epoch, the line of WaitForExclusive producers, and fencing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from magnetar.bookkeeper.runtime.clock import SystemClock
from magnetar.broker.core.errors import ProducerBusyError, ProducerFencedError, TopicClosedError
from magnetar.broker.core.non_persistent_topic import NonPersistentTopic
from magnetar.broker.core.producer import Capacity, Producer
from magnetar.broker.core.producer_access import AccessMode
from magnetar.broker.wire.topic_name import parse_topic_name


def _topic() -> NonPersistentTopic:
    return NonPersistentTopic(
        parse_topic_name("non-persistent://public/default/access", allow_non_persistent=True), SystemClock()
    )


def _add(
    topic: NonPersistentTopic, name: str, mode: AccessMode = AccessMode.SHARED, epoch: int | None = None
) -> Producer:
    def make() -> Producer:
        return Producer(topic, name, Capacity(10), partition=topic.partition, clock=SystemClock())

    return topic.add_producer(name, make, access=mode, topic_epoch=epoch)


async def _wait(
    topic: NonPersistentTopic, name: str, out: list[Producer | Exception], epoch: int | None = None
) -> None:
    def make() -> Producer:
        return Producer(topic, name, Capacity(10), partition=topic.partition, clock=SystemClock())

    try:
        out.append(
            await topic.wait_for_producer(
                name, make, access=AccessMode.WAIT_FOR_EXCLUSIVE, topic_epoch=epoch, queued=lambda leave: None
            )
        )
    except (ProducerFencedError, TopicClosedError) as exc:
        out.append(exc)


def test_shared_and_exclusive_exclude_each_other() -> None:
    topic = _topic()
    shared = _add(topic, "s")
    with pytest.raises(ProducerFencedError, match="existing shared producers"):
        _add(topic, "x", AccessMode.EXCLUSIVE)
    topic.remove_producer(shared)
    exclusive = _add(topic, "x", AccessMode.EXCLUSIVE)
    assert exclusive.topic_epoch == 0
    assert exclusive.stats()["accessMode"] == "Exclusive"
    with pytest.raises(ProducerBusyError, match="existing exclusive producer: x"):
        _add(topic, "s")
    with pytest.raises(ProducerFencedError, match="existing exclusive producer: x"):
        _add(topic, "y", AccessMode.EXCLUSIVE)
    with pytest.raises(ProducerBusyError, match="already connected"):
        _add(topic, "x", AccessMode.EXCLUSIVE)
    topic.remove_producer(exclusive)
    assert _add(topic, "y", AccessMode.EXCLUSIVE).topic_epoch == 1


def test_the_topic_epoch_fences_a_producer_that_was_overtaken() -> None:
    topic = _topic()
    for name in ("a", "b", "c"):
        topic.remove_producer(_add(topic, name, AccessMode.EXCLUSIVE))
    assert topic.access.epoch == 2
    with pytest.raises(ProducerFencedError, match="Current epoch: 2, Producer epoch: 1"):
        _add(topic, "a", AccessMode.EXCLUSIVE, epoch=1)
    assert _add(topic, "a", AccessMode.EXCLUSIVE, epoch=2).topic_epoch == 2  # a reconnect keeps its epoch


def test_fencing_ends_every_producer_and_every_waiter() -> None:
    topic = _topic()
    gone: list[str] = []
    shared = [_add(topic, f"s{i}") for i in range(3)]
    for producer in shared:
        producer.disconnect = gone.append
    fencer = _add(topic, "f", AccessMode.EXCLUSIVE_WITH_FENCING)
    assert len(gone) == 3
    assert all(p.closed for p in shared)
    assert list(topic.producers) == ["f"]
    assert fencer.topic_epoch == 0
    assert _add(topic, "g", AccessMode.EXCLUSIVE_WITH_FENCING).topic_epoch == 1
    assert fencer.closed


async def test_waiters_get_the_topic_in_turn_and_leave_the_line_when_cancelled() -> None:
    topic = _topic()
    holder = _add(topic, "h", AccessMode.EXCLUSIVE)
    first: list[Producer | Exception] = []
    second: list[Producer | Exception] = []
    cancelled: list[Producer | Exception] = []
    gone = trio.CancelScope()

    async def cancelled_waiter() -> None:
        with gone:
            await _wait(topic, "quitter", cancelled)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_wait, topic, "w1", first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(cancelled_waiter)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_wait, topic, "w2", second)
        await trio.testing.wait_all_tasks_blocked()
        assert [w.name for w in topic.access.waiting] == ["w1", "quitter", "w2"]
        gone.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert [w.name for w in topic.access.waiting] == ["w1", "w2"]
        with pytest.raises(ProducerBusyError):
            _add(topic, "shared")  # a Shared producer is refused while producers wait
        topic.remove_producer(holder)
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(first[0], Producer)
        assert first[0].topic_epoch == 1
        assert not second
        topic.remove_producer(first[0])
    assert isinstance(second[0], Producer)
    assert second[0].topic_epoch == 2
    assert not cancelled


async def test_waiters_fail_when_the_topic_closes_or_is_fenced() -> None:
    topic = _topic()
    _add(topic, "h", AccessMode.EXCLUSIVE)
    fenced: list[Producer | Exception] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_wait, topic, "w", fenced)
        await trio.testing.wait_all_tasks_blocked()
        _add(topic, "f", AccessMode.EXCLUSIVE_WITH_FENCING)
    assert isinstance(fenced[0], ProducerFencedError)
    closed: list[Producer | Exception] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_wait, topic, "w", closed)
        await trio.testing.wait_all_tasks_blocked()
        await topic.close("Topic unloaded")
    assert isinstance(closed[0], TopicClosedError)


async def test_a_waiter_with_an_old_epoch_is_fenced_when_its_turn_comes() -> None:
    topic = _topic()
    topic.remove_producer(_add(topic, "a", AccessMode.EXCLUSIVE))
    holder = _add(topic, "b", AccessMode.EXCLUSIVE)  # epoch 1
    stale: list[Producer | Exception] = []
    fresh: list[Producer | Exception] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_wait, topic, "old", stale, 0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_wait, topic, "new", fresh)
        await trio.testing.wait_all_tasks_blocked()
        topic.remove_producer(holder)
    assert isinstance(stale[0], ProducerFencedError)
    assert isinstance(fresh[0], Producer)
    assert fresh[0].topic_epoch == 2


async def test_leave_takes_a_waiter_out_of_the_line_before_its_task_runs() -> None:
    topic = _topic()
    holder = _add(topic, "h", AccessMode.EXCLUSIVE)
    leaves: list[Callable[[], None]] = []
    got: list[Producer | Exception] = []

    def make() -> Producer:
        return Producer(topic, "w", Capacity(10), partition=topic.partition, clock=SystemClock())

    async def waiter() -> None:
        got.append(
            await topic.wait_for_producer(
                "w", make, access=AccessMode.WAIT_FOR_EXCLUSIVE, topic_epoch=None, queued=leaves.append
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        leaves[0]()  # the client closed it: out of the line now, whatever the scheduler does next
        topic.remove_producer(holder)  # the topic is free, and nobody is given the turn
        assert topic.access.holder is None
        assert not topic.access.waiting
        nursery.cancel_scope.cancel()
    assert not got
    assert _add(topic, "x", AccessMode.EXCLUSIVE).topic_epoch == 1
