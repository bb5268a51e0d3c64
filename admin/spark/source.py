"""``MagnetarDataSource``: Magnetar topics as a PySpark (>= 4.0) Python data source named ``magnetar``.

How a streaming query runs (Pulsar's Spark connector, docs/upstream.md, Pulsar §7.2, over the admin REST API):

* ``load()`` parses the options and asks the broker about every named topic, so a typo, a missing topic or an
  unreachable broker fails there with a sentence naming the option or topic.
* ``initialOffset`` (a new query) resolves ``startingOffsets`` per partition and creates the query's durable
  subscription ``<subscriptionPrefix>-<partition>`` at that position on every partition: from then on
  retention cannot delete what the query has not read.
* ``latestOffset`` reads each partition's ``internalStats``: the end of a micro-batch is the last confirmed
  entry, cut down by the read limit (``maxEntriesPerTrigger``, shared between partitions) and, under
  ``availableNow``, by the target fixed in ``prepareForTriggerAvailableNow``.
* ``partitions(start, end)`` checks for data loss and splits ``(start, end]`` by partition and ledger into
  Spark partitions of at most ``maxEntriesPerPartition`` entries and about ``maxBytesPerPartition`` bytes;
  executors read them (:mod:`.reading`).
* ``commit(end)`` (Spark calls it once the batch after ``end``'s batch is planned) moves the subscriptions to
  ``end``, releasing what the query has processed to retention. ``stop()`` deletes the subscriptions when
  their prefix was generated for this run; a given ``subscriptionPrefix`` keeps them, so the data stays
  protected while the query is down and a restart from the checkpoint continues with no gap. Spark may
  never call ``stop()``; the checkpoint, not this object, is the source of truth for offsets.

Read limits: on PySpark >= 4.2 the engine passes the limit to ``latestOffset(start, limit)``; on 4.0/4.1 it
calls ``latestOffset()`` with neither, and the reader applies ``maxEntriesPerTrigger`` from the end of the
last batch it planned in this run (the first batch after a restart, and ``availableNow`` runs - where those
engines fix the end once at the start - read everything available).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from magnetar.admin.spark.client import (
    AdminClient,
    BrokerUnreachableError,
    MagnetarSourceError,
    TopicNotFoundError,
    shared_client,
)
from magnetar.admin.spark.compat import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from magnetar.admin.spark.offsets import EARLIEST, Boundary, OffsetSpec, Position, from_offset, to_offset
from magnetar.admin.spark.options import (
    ENDING_OFFSETS,
    SERVICE_URL,
    STARTING_OFFSETS,
    MagnetarOptionError,
    SourceOptions,
    check_batch_options,
    check_stream_options,
    parse_options,
)
from magnetar.admin.spark.planner import (
    PartitionState,
    advance,
    allocate,
    backlog,
    entry_bytes,
    segments,
    splits,
    start_lost,
)
from magnetar.admin.spark.reading import RangePartition, read_partition, report_loss
from magnetar.admin.spark.rows import spark_schema
from magnetar.admin.spark.topics import TopicPartition, check_topics, fetch_state, resolve, subscription_name
from magnetar.broker.wire import parse_topic_name

log = logging.getLogger("magnetar.spark")
GENERATED_PREFIX = "magnetar-spark-"


class MagnetarDataSource(DataSource):
    """``spark.dataSource.register(MagnetarDataSource)``, then ``spark.readStream.format("magnetar")``."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def _parsed(self) -> SourceOptions:
        return parse_options(self.options)

    def schema(self) -> StructType:
        options = self._parsed()
        client = AdminClient(options.service_url, options.request_timeout_s)
        try:
            check_topics(client, options)
        except BrokerUnreachableError as exc:
            raise MagnetarSourceError(f"magnetar: option '{SERVICE_URL}': {exc}") from None
        except TopicNotFoundError as exc:
            raise MagnetarSourceError(f"magnetar: {exc}") from None
        finally:
            client.close()
        schema: StructType = spark_schema()
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._parsed()
        check_batch_options(options)
        return MagnetarBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._parsed()
        check_stream_options(options)
        return MagnetarStreamReader(options)


# -- shared by both readers --------------------------------------------------------------------------------


def _check_spec(spec: OffsetSpec, option: str, partitions: Sequence[TopicPartition]) -> None:
    names = {p.name for p in partitions}
    for name, _ in spec.partitions:
        if name not in names:
            raise MagnetarOptionError(
                f"option '{option}' names {name}, which is not a partition of the topics read "
                f"({', '.join(sorted(names)) or 'none'})"
            )


def _boundary(value: Position | Boundary, state: PartitionState | None, option: str, name: str) -> Position:
    if value == "earliest" or (state is None and value == "latest"):
        return EARLIEST
    if value == "latest":
        assert state is not None
        return state.latest
    assert isinstance(value, tuple)
    last = state.last_confirmed if state is not None else EARLIEST
    if value > last:
        raise MagnetarOptionError(
            f"option '{option}': offset {value[0]}:{value[1]} of {name} is past its last entry "
            f"{last[0]}:{last[1]}"
        )
    return value


def _plan(
    options: SourceOptions, part: TopicPartition, state: PartitionState, start: Position, end: Position
) -> list[RangePartition]:
    lost = start_lost(state, start)
    if lost is not None:
        report_loss(options, f"{part.name}: {lost}")
    parts = segments(state, start, end)
    chunks = splits(
        parts, options.max_entries_per_partition, options.max_bytes_per_partition, entry_bytes(state)
    )
    return [RangePartition(part, chunk) for chunk in chunks]


def _partition_of(name: str, options: SourceOptions) -> TopicPartition:
    topic = parse_topic_name(name)
    base = topic.partitioned_topic
    return TopicPartition(name, str(base), topic.partition_index, named=topic in options.topics)


# -- batch reads -------------------------------------------------------------------------------------------


class MagnetarBatchReader(DataSourceReader):
    """``spark.read.format("magnetar")``: the entries after ``startingOffsets`` (default ``earliest``) up to
    and including ``endingOffsets`` (default ``latest``), planned once. Batch reads keep no subscription."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        client = shared_client(options.service_url, options.request_timeout_s)
        starting = options.starting_offsets or OffsetSpec("earliest")
        ending = options.ending_offsets or OffsetSpec("latest")
        partitions = resolve(client, options)
        _check_spec(starting, STARTING_OFFSETS, partitions)
        _check_spec(ending, ENDING_OFFSETS, partitions)
        out: list[InputPartition] = []
        for part in partitions:
            state = fetch_state(client, part)
            if state is None:
                continue
            start = _boundary(starting.for_partition(part.name), state, STARTING_OFFSETS, part.name)
            end = _boundary(ending.for_partition(part.name), state, ENDING_OFFSETS, part.name)
            if end > start:
                out.extend(_plan(options, part, state, start, end))
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, partition)


# -- streaming ---------------------------------------------------------------------------------------------


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.prefix = options.subscription_prefix or f"{GENERATED_PREFIX}{uuid.uuid4().hex[:16]}"
        self.owns_subscriptions = options.subscription_prefix is None
        self._partitions: dict[str, TopicPartition] = {}
        self._subscribed: set[str] = set()
        self._committed: dict[str, Position] = {}
        self._known_end: dict[str, Position] | None = None
        """The end of the last batch planned or offered in this run (PySpark < 4.2 gives no start)."""
        self._target: dict[str, Position] | None = None
        """``availableNow``: where this run ends."""

    @property
    def _client(self) -> AdminClient:
        return shared_client(self.options.service_url, self.options.request_timeout_s)

    def _resolve(self) -> list[TopicPartition]:
        partitions = resolve(self._client, self.options)
        self._partitions.update((p.name, p) for p in partitions)
        return partitions

    def _partition(self, name: str) -> TopicPartition:
        part = self._partitions.get(name)
        if part is None:
            part = self._partitions[name] = _partition_of(name, self.options)
        return part

    def _subscription(self, part: TopicPartition) -> str:
        return subscription_name(self.prefix, part)

    def _state(self, part: TopicPartition) -> PartitionState | None:
        """The partition's state; a topic the query reads that was deleted is data loss."""
        try:
            return fetch_state(self._client, part, self._subscription(part))
        except TopicNotFoundError as exc:
            report_loss(self.options, f"{part.name} was deleted ({exc})")
            return None

    def _ensure_subscription(
        self,
        part: TopicPartition,
        after: Position,
        state: PartitionState | None,
        *,
        lost_reported: bool = False,
    ) -> None:
        """The query's subscription on ``part`` exists (created with everything up to ``after`` consumed).

        A missing one is not created while entries after ``after`` may already be lost: its cursor would
        then vouch for data it never protected. :meth:`partitions` reports the loss first and creates it."""
        if part.name in self._subscribed:
            return
        if state is None or state.cursor is None:
            if state is not None and not lost_reported and start_lost(state, after) is not None:
                return
            after_or_none = None if after == EARLIEST else after
            self._client.create_subscription(part.topic_name, self._subscription(part), after_or_none)
        self._subscribed.add(part.name)

    # -- offsets ---------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        spec = self.options.starting_offsets or OffsetSpec("latest")
        partitions = self._resolve()
        _check_spec(spec, STARTING_OFFSETS, partitions)
        positions: dict[str, Position] = {}
        for part in partitions:
            state = fetch_state(self._client, part, self._subscription(part))
            positions[part.name] = _boundary(
                spec.for_partition(part.name), state, STARTING_OFFSETS, part.name
            )
            self._ensure_subscription(part, positions[part.name], state)
        self._known_end = positions
        return to_offset(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_entries_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        target: dict[str, Position] = {}
        for part in self._resolve():
            state = self._state(part)
            if state is not None:
                target[part.name] = state.latest
        self._target = target

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        begin = from_offset(start) if start is not None else self._known_end
        known = begin is not None
        begin = begin or {}
        ends: dict[str, Position] = dict(begin)
        states: dict[str, PartitionState] = {}
        for part in self._resolve():
            after = begin.get(part.name, EARLIEST)
            state = self._state(part)
            if state is not None or not part.named:  # never re-create a deleted topic with a subscription
                self._ensure_subscription(part, after if known else EARLIEST, state)
            if state is None:
                ends.setdefault(part.name, after)
                continue
            latest = state.latest
            if self._target is not None:
                latest = min(latest, self._target.get(part.name, after))
            ends[part.name] = max(after, latest)
            states[part.name] = state
        max_entries = self._max_entries(limit, known)
        if max_entries is not None:
            sizes = {
                name: backlog(state, begin.get(name, EARLIEST), ends[name]) for name, state in states.items()
            }
            for name, grant in allocate(sizes, max_entries).items():
                if grant < sizes[name]:
                    ends[name] = advance(states[name], begin.get(name, EARLIEST), grant, ends[name])
        self._known_end = ends
        return to_offset(ends)

    def _max_entries(self, limit: ReadLimit | None, known: bool) -> int | None:
        if isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if limit is None and known:  # PySpark < 4.2: no limit from the engine, apply the option
            return self.options.max_entries_per_trigger
        return None

    # -- batches ---------------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = from_offset(start), from_offset(end)
        self._known_end = finish
        out: list[InputPartition] = []
        for name in sorted(finish):
            after, until = begin.get(name, EARLIEST), finish[name]
            if until == after:
                continue
            part = self._partition(name)
            state = self._state(part)
            if state is None:
                if not part.named:  # (a named topic was reported by _state)
                    report_loss(self.options, f"{name} no longer exists")
                continue
            if until < after:
                report_loss(self.options, f"{name}: the batch ends at {until} before its start {after}")
                continue
            out.extend(_plan(self.options, part, state, after, until))
            self._ensure_subscription(part, after, state, lost_reported=True)
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        for name, position in from_offset(end).items():
            if position == EARLIEST or self._committed.get(name) == position:
                continue
            part = self._partition(name)
            topic, subscription = part.topic_name, self._subscription(part)
            try:
                if self._client.reset_cursor(topic, subscription, position):
                    self._committed[name] = position
                else:  # deleted under the query: the next trigger checks for loss before creating it again
                    log.warning("magnetar: subscription %s on %s is gone", subscription, name)
                    self._subscribed.discard(name)
            except MagnetarSourceError as exc:
                log.warning("magnetar: could not move subscription %s on %s: %s", subscription, name, exc)

    def stop(self) -> None:
        if not self.owns_subscriptions:
            return
        for name in sorted(self._subscribed):
            part = self._partition(name)
            try:
                self._client.delete_subscription(part.topic_name, self._subscription(part))
            except MagnetarSourceError as exc:
                log.warning(
                    "magnetar: could not delete subscription %s on %s: %s",
                    self._subscription(part),
                    name,
                    exc,
                )
        self._subscribed.clear()
