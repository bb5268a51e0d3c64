"""The options of the ``magnetar`` Spark source, parsed and checked before anything touches the network.

Spark hands a data source its options as a case-insensitive string map. :func:`parse_options` turns them
into :class:`SourceOptions` (frozen, picklable: it travels to every executor inside the reader) or raises
:class:`MagnetarOptionError` naming the option, so a typo fails ``load()`` with one clear sentence instead of
a stack trace from a worker. The names follow Pulsar's Spark connector (docs/upstream.md, Pulsar §7.1) where
it has one; ``serviceUrl`` is the HTTP URL of any broker (the connector's ``admin.url``; Magnetar reads
through the admin REST API, so no binary-protocol URL is needed).

| option | default | meaning |
|---|---|---|
| ``serviceUrl`` | required | ``http://host:port`` of any broker (307s lead to the owners) |
| ``topic`` | one of three | one topic (partitioned or not) |
| ``topics`` | one of three | a comma list of topics |
| ``topicsPattern`` | one of three | a regex over ``persistent://tenant/namespace/...`` names |
| ``startingOffsets`` | stream: latest | ``earliest``, ``latest`` or per-partition JSON (batch: earliest) |
| ``endingOffsets`` | ``latest`` | batch only: ``latest`` or per-partition JSON |
| ``maxEntriesPerTrigger`` | unlimited | entries per micro-batch over all partitions (stream only) |
| ``failOnDataLoss`` | ``true`` | fail when needed data was deleted; ``false`` skips with a warning |
| ``subscriptionPrefix`` | generated | ``magnetar-spark-<random>`` per run; names the query's subscriptions |
| ``maxEntriesPerPartition`` | 50000 | entries read by one Spark task at most (splits big ranges) |
| ``maxBytesPerPartition`` | 32 MiB | about this many bytes per Spark task (by the ledgers' entry sizes) |
| ``requestTimeoutMs`` | 60000 | timeout of every HTTP request to a broker |
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from magnetar.admin.spark.offsets import Boundary, OffsetSpec, parse_offset_spec
from magnetar.broker.wire import InvalidTopicNameError, TopicName, parse_topic_name

MAX_ENTRIES_PER_PARTITION_DEFAULT = 50_000
MAX_BYTES_PER_PARTITION_DEFAULT = 32 * 1024 * 1024
REQUEST_TIMEOUT_MS_DEFAULT = 60_000
SUBSCRIPTION_PREFIX_CHARS_MAX = 200
"""A subscription is named ``<prefix>-<partition local name>``; the broker accepts 1024 characters."""

SERVICE_URL = "serviceUrl"
TOPIC = "topic"
TOPICS = "topics"
TOPICS_PATTERN = "topicsPattern"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
MAX_ENTRIES_PER_TRIGGER = "maxEntriesPerTrigger"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
SUBSCRIPTION_PREFIX = "subscriptionPrefix"
MAX_ENTRIES_PER_PARTITION = "maxEntriesPerPartition"
MAX_BYTES_PER_PARTITION = "maxBytesPerPartition"
REQUEST_TIMEOUT_MS = "requestTimeoutMs"
KNOWN_OPTIONS = (SERVICE_URL, TOPIC, TOPICS, TOPICS_PATTERN, STARTING_OFFSETS, ENDING_OFFSETS,
                 MAX_ENTRIES_PER_TRIGGER, FAIL_ON_DATA_LOSS, SUBSCRIPTION_PREFIX, MAX_ENTRIES_PER_PARTITION,
                 MAX_BYTES_PER_PARTITION, REQUEST_TIMEOUT_MS)  # fmt: skip
_BY_LOWER = {name.lower(): name for name in KNOWN_OPTIONS}
_PATTERN_HEAD = re.compile(r"persistent://([-=:.A-Za-z0-9_]+)/([-=:.A-Za-z0-9_]+)/(.*)", re.DOTALL)


class MagnetarOptionError(ValueError):
    """An option is missing, unknown or malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """``topicsPattern``: a regex matched (in full) against topic names of one namespace."""

    tenant: str
    namespace: str
    regex: str

    def matches(self, full_name: str) -> bool:
        return re.fullmatch(self.regex, full_name) is not None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    service_url: str
    topics: tuple[TopicName, ...]
    """The ``topic``/``topics`` names (partitioned or not); empty when a pattern is given."""
    pattern: TopicPattern | None
    starting_offsets: OffsetSpec | None
    """None: the mode's default (stream ``latest``, batch ``earliest``)."""
    ending_offsets: OffsetSpec | None
    max_entries_per_trigger: int | None
    fail_on_data_loss: bool
    subscription_prefix: str | None
    """None: a fresh ``magnetar-spark-<uuid>`` per run, deleted when the query stops."""
    max_entries_per_partition: int
    max_bytes_per_partition: int
    request_timeout_ms: int

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    given = _canonical(options)
    return SourceOptions(
        service_url=_service_url(given.get(SERVICE_URL)),
        topics=_topics(given),
        pattern=_pattern(given.get(TOPICS_PATTERN)),
        starting_offsets=_spec(given, STARTING_OFFSETS, "earliest"),
        ending_offsets=_spec(given, ENDING_OFFSETS, "latest"),
        max_entries_per_trigger=_positive(given, MAX_ENTRIES_PER_TRIGGER),
        fail_on_data_loss=_boolean(given, FAIL_ON_DATA_LOSS, default=True),
        subscription_prefix=_prefix(given.get(SUBSCRIPTION_PREFIX)),
        max_entries_per_partition=_positive(given, MAX_ENTRIES_PER_PARTITION)
        or MAX_ENTRIES_PER_PARTITION_DEFAULT,
        max_bytes_per_partition=_positive(given, MAX_BYTES_PER_PARTITION) or MAX_BYTES_PER_PARTITION_DEFAULT,
        request_timeout_ms=_positive(given, REQUEST_TIMEOUT_MS) or REQUEST_TIMEOUT_MS_DEFAULT,
    )


def check_stream_options(options: SourceOptions) -> None:
    if options.ending_offsets is not None:
        raise MagnetarOptionError(f"option '{ENDING_OFFSETS}' is not valid in streaming queries")


def check_batch_options(options: SourceOptions) -> None:
    for name, value in ((MAX_ENTRIES_PER_TRIGGER, options.max_entries_per_trigger),
                        (SUBSCRIPTION_PREFIX, options.subscription_prefix)):  # fmt: skip
        if value is not None:
            raise MagnetarOptionError(f"option '{name}' is only valid in streaming queries")


def _canonical(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in options.items():
        name = _BY_LOWER.get(key.lower())
        if name is None:
            known = ", ".join(KNOWN_OPTIONS)
            raise MagnetarOptionError(f"unknown option '{key}' (the magnetar source takes: {known})")
        out[name] = value
    return out


def _service_url(value: str | None) -> str:
    if not value:
        raise MagnetarOptionError(f"option '{SERVICE_URL}' is required (e.g. http://127.0.0.1:8080)")
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == -1
        or parts.path not in ("", "/")
    ):
        raise MagnetarOptionError(f"option '{SERVICE_URL}' must be http(s)://host:port, got {value!r}")
    return value.rstrip("/")


def _topic_name(option: str, text: str) -> TopicName:
    try:
        return parse_topic_name(text.strip())
    except InvalidTopicNameError as exc:
        raise MagnetarOptionError(f"option '{option}': {exc}") from None


def _topics(given: Mapping[str, str]) -> tuple[TopicName, ...]:
    chosen = [name for name in (TOPIC, TOPICS, TOPICS_PATTERN) if name in given]
    if len(chosen) != 1:
        raise MagnetarOptionError(
            f"exactly one of '{TOPIC}', '{TOPICS}' or '{TOPICS_PATTERN}' must be given, "
            f"got {', '.join(chosen) or 'none'}"
        )
    if TOPIC in given:
        if "," in given[TOPIC]:
            raise MagnetarOptionError(f"option '{TOPIC}' takes one topic; use '{TOPICS}' for a comma list")
        return (_topic_name(TOPIC, given[TOPIC]),)
    if TOPICS in given:
        names = [part for part in given[TOPICS].split(",") if part.strip()]
        if not names:
            raise MagnetarOptionError(f"option '{TOPICS}' names no topic")
        return tuple(dict.fromkeys(_topic_name(TOPICS, name) for name in names))
    return ()


def _pattern(value: str | None) -> TopicPattern | None:
    if value is None:
        return None
    match = _PATTERN_HEAD.fullmatch(value)
    if match is None:
        raise MagnetarOptionError(
            f"option '{TOPICS_PATTERN}' must start with persistent://<tenant>/<namespace>/, got {value!r}"
        )
    try:
        re.compile(value)
    except re.error as exc:
        raise MagnetarOptionError(f"option '{TOPICS_PATTERN}' is not a valid regex: {exc}") from None
    return TopicPattern(match[1], match[2], value)


def _spec(given: Mapping[str, str], option: str, unnamed: Boundary) -> OffsetSpec | None:
    if option not in given:
        return None
    try:
        return parse_offset_spec(given[option], unnamed)
    except ValueError as exc:
        raise MagnetarOptionError(f"option '{option}': {exc}") from None


def _positive(given: Mapping[str, str], option: str) -> int | None:
    if option not in given:
        return None
    text = given[option].strip()
    if not text.isdigit() or int(text) < 1:
        raise MagnetarOptionError(f"option '{option}' must be a positive integer, got {given[option]!r}")
    return int(text)


def _boolean(given: Mapping[str, str], option: str, *, default: bool) -> bool:
    if option not in given:
        return default
    text = given[option].strip().lower()
    if text not in ("true", "false"):
        raise MagnetarOptionError(f"option '{option}' must be true or false, got {given[option]!r}")
    return text == "true"


def _prefix(value: str | None) -> str | None:
    if value is None:
        return None
    if not value or len(value) > SUBSCRIPTION_PREFIX_CHARS_MAX or "/" in value:
        raise MagnetarOptionError(
            f"option '{SUBSCRIPTION_PREFIX}' must be 1..{SUBSCRIPTION_PREFIX_CHARS_MAX} characters "
            f"without '/', got {value!r}"
        )
    return value
