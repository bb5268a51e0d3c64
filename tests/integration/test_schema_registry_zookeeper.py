"""The schema registry on a real ZooKeeper: versions, a large schema near ``schema_data_bytes_max``, a
deletion mark and a forced delete, as on the standalone's embedded store."""

from __future__ import annotations

import pytest

from magnetar.bookkeeper.metadata import open_metadata_store
from magnetar.broker.schemas import Schema, SchemaRegistry, SchemaSettings, SchemaType, Strategy
from magnetar.broker.wire import parse_topic_name

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]

TOPIC = parse_topic_name("persistent://public/default/zk-schemas")


def _avro(extra: str = "") -> bytes:
    return ('{"type":"record","name":"R","fields":[{"name":"a","type":"int"}' + extra + "]}").encode()


async def test_registry_on_zookeeper(zookeeper_url: str) -> None:
    async with open_metadata_store(zookeeper_url) as metadata:
        registry = SchemaRegistry(metadata, SchemaSettings().schema_limits(), lambda: 1)
        big = _avro(',{"name":"b","type":"string","default":"' + "x" * 900_000 + '"}')
        assert await registry.put(TOPIC, Schema(SchemaType.AVRO, _avro()), Strategy.FULL) == 0
        assert await registry.put(TOPIC, Schema(SchemaType.AVRO, big), Strategy.FULL) == 1
        stored = await registry.get(TOPIC.partition(1), 1)
        assert stored is not None
        assert stored.data == big
        assert await registry.delete(TOPIC) == 2
        assert await registry.get(TOPIC) is None
        assert await registry.delete(TOPIC, force=True) is None
        assert await registry.history(TOPIC) == []
