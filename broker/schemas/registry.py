"""The schema registry's storage: each topic's schema history in the metadata store (the standalone's embedded
store or ZooKeeper), with the decisions of :mod:`.core`.

Layout: ``/schemas/<tenant>/<namespace>/<topic>`` holds the history's index - a JSON list of versions
(number, type, content digest, timestamp, deletion mark, properties), small whatever the schemas' size - and
its child ``<version>`` (decimal) holds that version's data as raw bytes. ``<topic>`` is the local name
URL-encoded, of the base topic for a partition: a partitioned topic's partitions share one history, and the
domain is not part of the key (Pulsar keys schemas by ``tenant/namespace/topic`` too).

Writes: the data node first, then the index by compare-and-set on the version read, so two brokers (or an
admin and a producer) adding a version at once cannot both win - the loser retries once from a fresh read,
then fails with :class:`~.core.SchemaError`. A data node whose index write lost is overwritten by the next
version that takes its number. Reads go to the store each time: schemas are read when a producer or
consumer attaches, never per message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.bookkeeper.metadata import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    ValueTooLargeError,
)
from magnetar.broker.schemas import core
from magnetar.broker.schemas.core import Schema, SchemaError, SchemaType, Strategy, VersionEntry
from magnetar.broker.wire import TopicName, url_encode

SCHEMAS = "/schemas"
SchemaStoreError = MetadataStoreError
"""What the registry's methods raise when the metadata store fails (besides :class:`~.core.SchemaError`)."""
_PUT_ATTEMPTS = 2

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SchemaLimits:
    """The broker's settings the registry applies."""

    data_bytes_max: int
    versions_max: int
    strategy: Strategy
    """The broker's compatibility strategy (``schema_compatibility_strategy``)."""


@dataclass(frozen=True, slots=True)
class StoredSchema:
    entry: VersionEntry
    data: bytes


class SchemaRegistry:
    """Schemas of the topics, as the binary protocol and the admin API ask for them (module docstring)."""

    def __init__(self, store: MetadataStore, limits: SchemaLimits, clock_ms: Callable[[], int]) -> None:
        self._store = store
        self.limits = limits
        self._clock_ms = clock_ms

    @staticmethod
    def path_of(topic: TopicName) -> str:
        base = topic.partitioned_topic
        return f"{SCHEMAS}/{base.tenant}/{base.namespace}/{url_encode(base.local_name)}"

    async def _index(self, topic: TopicName) -> tuple[list[VersionEntry], int | None]:
        result = await self._store.get(self.path_of(topic))
        if result is None:
            return [], None
        return _decode_index(result.value or b"[]"), result.stat.version

    async def history(self, topic: TopicName) -> list[VersionEntry]:
        return (await self._index(topic))[0]

    async def _data(self, topic: TopicName, version: int) -> bytes:
        result = await self._store.get(f"{self.path_of(topic)}/{version}")
        return b"" if result is None else bytes(result.value or b"")

    async def get(self, topic: TopicName, version: int | None = None) -> StoredSchema | None:
        """The latest live version (``version`` None) or a given live version; None when there is none."""
        history = await self.history(topic)
        entry = core.latest(history) if version is None else core.find(history, version)
        if entry is None:
            return None
        return StoredSchema(entry, await self._data(topic, entry.version))

    async def all_live(self, topic: TopicName) -> list[StoredSchema]:
        return [
            StoredSchema(e, await self._data(topic, e.version)) for e in core.live(await self.history(topic))
        ]

    async def find_version(self, topic: TopicName, schema: Schema) -> int | None:
        return core.existing_version(await self.history(topic), schema)

    def strategy(self, namespace_strategy: Strategy = Strategy.UNDEFINED) -> Strategy:
        return core.effective(namespace_strategy, self.limits.strategy)

    async def check(self, topic: TopicName, schema: Schema, strategy: Strategy) -> None:
        """Refuse (:class:`SchemaError`) ``schema`` if it may not join the topic's history now."""
        core.validate(schema, self.limits.data_bytes_max)
        history = await self.history(topic)
        if core.existing_version(history, schema) is not None:
            return
        await self._check_against(topic, history, schema, strategy)

    async def _check_against(
        self, topic: TopicName, history: list[VersionEntry], schema: Schema, strategy: Strategy
    ) -> None:
        checked = core.versions_to_check(history, strategy)
        existing = [(e, await self._data(topic, e.version)) for e in checked]
        core.check(existing, schema, strategy)

    async def put(self, topic: TopicName, schema: Schema, strategy: Strategy) -> int:
        """The version of ``schema`` in the topic's history: an identical live one's, else a new one once
        the strategy allows it (:class:`SchemaError` otherwise)."""
        core.validate(schema, self.limits.data_bytes_max)
        for attempt in range(_PUT_ATTEMPTS):
            history, stat_version = await self._index(topic)
            found = core.existing_version(history, schema)
            if found is not None:
                return found
            await self._check_against(topic, history, schema, strategy)
            version = core.next_version(history, self.limits.versions_max)
            entry = VersionEntry(
                version, schema.type, schema.digest, self._clock_ms(), properties=schema.properties
            )
            try:
                await self._write(topic, history, stat_version, entry, schema.data)
            except BadVersionError:
                if attempt + 1 == _PUT_ATTEMPTS:
                    raise SchemaError("the topic's schema was modified concurrently; try again") from None
                continue
            log.info("schema of %s: version %d (%s)", topic.partitioned_topic, version, schema.type.name)
            return version
        raise AssertionError("unreachable")

    async def add_for_consumer(
        self, topic: TopicName, schema: Schema, strategy: Strategy, *, idle: bool
    ) -> None:
        """A consumer's schema, as Pulsar takes it: on an idle topic without a schema it becomes the topic's
        schema; otherwise it must be readable against the latest (:func:`.core.consumer_strategy`)."""
        core.validate(schema, self.limits.data_bytes_max)
        history = await self.history(topic)
        if core.latest(history) is None:
            if idle:
                await self.put(topic, schema, strategy)
                return
            raise SchemaError("Topic does not have schema to check", incompatible=True)
        if strategy is Strategy.ALWAYS_COMPATIBLE or core.existing_version(history, schema) is not None:
            return
        await self._check_against(topic, history, schema, core.consumer_strategy(strategy))

    async def delete(self, topic: TopicName, *, force: bool = False) -> int | None:
        """Deletes the topic's schema: a deletion mark (its version is answered), or with ``force`` the whole
        history (None). A topic without a live schema is left as it is (its last version, or None)."""
        if force:
            await self._store.delete_recursive(self.path_of(topic))
            return None
        history, stat_version = await self._index(topic)
        if not history or history[-1].deleted:
            return history[-1].version if history else None
        version = core.next_version(history, self.limits.versions_max)
        mark = VersionEntry(
            version, SchemaType.NONE, core.digest_of(SchemaType.NONE, b""), self._clock_ms(), True
        )
        try:
            await self._write(topic, history, stat_version, mark, b"")
        except BadVersionError:
            raise SchemaError("the topic's schema was modified concurrently; try again") from None
        return version

    async def _write(
        self,
        topic: TopicName,
        history: list[VersionEntry],
        stat_version: int | None,
        entry: VersionEntry,
        data: bytes,
    ) -> None:
        path = self.path_of(topic)
        index = _encode_index([*history, entry])
        try:
            await self._store.put(f"{path}/{entry.version}", data, None)
            await self._store.put(path, index, -1 if stat_version is None else stat_version)
        except ValueTooLargeError as exc:
            raise SchemaError(f"the schema does not fit the metadata store: {exc}", invalid=True) from None


def _encode_index(history: list[VersionEntry]) -> bytes:
    return json.dumps(
        [
            {
                "version": e.version,
                "type": e.type.name,
                "digest": e.digest,
                "timestamp": e.timestamp_ms,
                "deleted": e.deleted,
                "properties": dict(e.properties),
            }
            for e in history
        ],
        separators=(",", ":"),
    ).encode()


def _decode_index(data: bytes) -> list[VersionEntry]:
    try:
        items = json.loads(data)
        return [
            VersionEntry(
                int(item["version"]),
                SchemaType[item["type"]],
                str(item["digest"]),
                int(item["timestamp"]),
                bool(item["deleted"]),
                tuple((str(k), str(v)) for k, v in dict(item["properties"]).items()),
            )
            for item in items
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"corrupt schema index: {exc}") from None
