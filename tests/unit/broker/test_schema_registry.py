"""The schema registry's storage (:mod:`magnetar.broker.schemas.registry`) on the in-memory metadata store:
versions, deletion marks, a forced delete, partitions sharing their base topic's history, concurrent puts
and the bounds."""

from __future__ import annotations

import pytest
import trio

from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.schemas import Schema, SchemaError, SchemaLimits, SchemaRegistry, SchemaType, Strategy
from magnetar.broker.wire import parse_topic_name

TOPIC = parse_topic_name("persistent://public/default/orders")


def _registry(versions_max: int = 100, data_bytes_max: int = 1000) -> SchemaRegistry:
    limits = SchemaLimits(data_bytes_max, versions_max, Strategy.FULL)
    return SchemaRegistry(MemoryMetadataStore(), limits, lambda: 1234)


def _string(data: bytes) -> Schema:
    return Schema(SchemaType.STRING, data)


async def test_versions_marks_and_force() -> None:
    registry = _registry()
    assert await registry.get(TOPIC) is None
    assert await registry.put(TOPIC, _string(b"a"), Strategy.FULL) == 0
    assert await registry.put(TOPIC, _string(b"b"), Strategy.FULL) == 1
    assert await registry.put(TOPIC, _string(b"a"), Strategy.FULL) == 0  # identical to a live version
    stored = await registry.get(TOPIC)
    assert stored is not None
    assert (stored.entry.version, stored.data, stored.entry.timestamp_ms) == (
        1,
        b"b",
        1234,
    )
    assert await registry.delete(TOPIC) == 2
    assert await registry.delete(TOPIC) == 2  # nothing live: unchanged
    assert await registry.get(TOPIC) is None
    assert await registry.get(TOPIC, 0) is None
    assert await registry.put(TOPIC, _string(b"a"), Strategy.FULL) == 3
    assert [s.entry.version for s in await registry.all_live(TOPIC)] == [3]
    assert await registry.delete(TOPIC, force=True) is None
    assert await registry.history(TOPIC) == []


async def test_partitions_share_the_base_topics_history() -> None:
    registry = _registry()
    await registry.put(TOPIC.partition(3), _string(b"a"), Strategy.FULL)
    stored = await registry.get(TOPIC)
    assert stored is not None
    assert stored.data == b"a"


async def test_concurrent_puts_take_distinct_versions() -> None:
    registry = _registry()
    versions: list[int] = []
    refusals: list[str] = []

    async def put(data: bytes) -> None:
        try:
            versions.append(await registry.put(TOPIC, _string(data), Strategy.FULL))
        except SchemaError as exc:
            refusals.append(exc.message)

    async with trio.open_nursery() as nursery:
        for data in (b"x", b"y", b"z"):
            nursery.start_soon(put, data)
    assert len(set(versions)) == len(versions)
    assert all("concurrently" in message for message in refusals)
    assert [e.version for e in await registry.history(TOPIC)] == list(range(len(versions)))


async def test_bounds() -> None:
    registry = _registry(versions_max=2, data_bytes_max=4)
    await registry.put(TOPIC, _string(b"a"), Strategy.FULL)
    await registry.put(TOPIC, _string(b"b"), Strategy.FULL)
    with pytest.raises(SchemaError, match="schema_versions_max"):
        await registry.put(TOPIC, _string(b"c"), Strategy.FULL)
    with pytest.raises(SchemaError, match="exceeds 4 bytes"):
        await registry.put(TOPIC, _string(b"12345"), Strategy.FULL)


async def test_consumers_schema_on_an_idle_topic_becomes_version_0() -> None:
    registry = _registry()
    with pytest.raises(SchemaError, match="Topic does not have schema to check"):
        await registry.add_for_consumer(TOPIC, _string(b"a"), Strategy.FULL, idle=False)
    await registry.add_for_consumer(TOPIC, _string(b"a"), Strategy.FULL, idle=True)
    await registry.add_for_consumer(TOPIC, _string(b"a"), Strategy.FULL, idle=False)
    with pytest.raises(SchemaError, match="exists schema type STRING"):
        await registry.add_for_consumer(TOPIC, Schema(SchemaType.INT8, b""), Strategy.FULL, idle=False)
