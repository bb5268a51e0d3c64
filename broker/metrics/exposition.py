"""Prometheus text exposition (format 0.0.4) of the broker's metrics, rendered a little at a time.

Theory of operation. A scrape of a broker with thousands of topics is megabytes of text; rendering it in one
go held the event loop for the whole of it (half a second and more for 3,000 topics), and every publish and
delivery waited that long. Here the body of a ``/metrics`` answer is an async iterator (:class:`Exposition`):
each step formats rows until its chunk holds ``chunk_bytes`` or ``step_ms`` have passed, lets the other tasks
run (a checkpoint), and hands the chunk to the HTTP connection, which sends it chunked. The rows are read
from the live objects as they are formatted, as any Prometheus client does: a scrape is not a snapshot, each
value is current when it is read (a family's rows for one topic are read together, between two steps).

What is exposed comes from :class:`MetricsSource` objects: the broker's own (:mod:`.broker_metrics`) and those
the composition root adds (the storage figures of :mod:`magnetar.admin.processes.metrics`). A source yields
:class:`Family` declarations - name, type, help, label names; the names are declared once, in the module of
the source's layer - each with an iterable of rows: ``(label values, value)``, or for a histogram ``(label
values, per-bucket counts, sum)``.

Aggregation. With ``expose_topic_level_metrics_in_prometheus`` false (Pulsar's
``exposeTopicLevelMetricsInPrometheus``, default true), the labels that name a topic or a subscription
(:data:`TOPIC_LEVEL_LABELS`) are dropped and the rows that then share their labels are summed - per
namespace, histograms bucket by bucket - so a scrape's size no longer grows with the number of topics.

Compression: when the scraper accepts gzip (Prometheus does) the chunks are compressed as they are made.
"""

from __future__ import annotations

import enum
import math
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import trio

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TOPIC_LEVEL_LABELS = frozenset({"topic", "subscription"})
"""Labels dropped (their rows summed) when topic-level metrics are off."""
GZIP_LEVEL = 6
ROWS_PER_CLOCK_READ = 32
"""Rows formatted between two looks at the clock (a clock read costs about as much as a row)."""


class Kind(enum.StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family. A counter's samples are named ``<name>_total``; a histogram's ``<name>_bucket``
    (one per bound of ``buckets`` plus ``+Inf``), ``<name>_count`` and ``<name>_sum``."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    """A histogram's upper bounds (its rows carry one count per bound plus one for the overflow)."""

    @property
    def exposed_name(self) -> str:
        return f"{self.name}_total" if self.kind is Kind.COUNTER else self.name


Row = tuple[tuple[str, ...], float]
HistogramRow = tuple[tuple[str, ...], Sequence[float], float]
FamilyRows = tuple[Family, Iterable[Any]]
"""A family and its rows (:data:`Row` or, for a histogram, :data:`HistogramRow`)."""


class MetricsSource(Protocol):
    def families(self) -> Iterator[FamilyRows]:
        """Every family of this source with its rows, read lazily from the live objects."""
        ...


def format_value(value: float) -> str:
    """As Prometheus' Go client writes floats (``1.0``, ``+Inf``, ``NaN``)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


class _Labels:
    """Rendered ``{a="x",b="y"}`` label sets, cached for one scrape (a topic's labels repeat in every
    family)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}

    def render(self, names: tuple[str, ...], values: tuple[str, ...]) -> str:
        key = (names, values)
        text = self._cache.get(key)
        if text is None:
            if names:
                pairs = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True))
                text = "{" + pairs + "}"
            else:
                text = ""
            self._cache[key] = text
        return text

    def with_le(self, names: tuple[str, ...], values: tuple[str, ...], bound: str) -> str:
        pairs = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
        pairs.append(f'le="{bound}"')
        return "{" + ",".join(pairs) + "}"


def _aggregated(family: Family, rows: Iterable[Any]) -> tuple[Family, Iterator[Any]]:
    """The family without its topic-level labels and rows summed over them (a generator that yields
    ``None`` while it sums, so the renderer can stop between rows)."""
    keep = [i for i, name in enumerate(family.labels) if name not in TOPIC_LEVEL_LABELS]
    if len(keep) == len(family.labels):
        return family, iter(rows)
    reduced = Family(
        family.name, family.kind, family.help, tuple(family.labels[i] for i in keep), family.buckets
    )

    def summed() -> Iterator[Any]:
        totals: dict[tuple[str, ...], Any] = {}
        for row in rows:
            key = tuple(row[0][i] for i in keep)
            if family.kind is Kind.HISTOGRAM:
                counts, total = totals.get(key, ([0.0] * (len(family.buckets) + 1), 0.0))
                totals[key] = ([a + b for a, b in zip(counts, row[1], strict=True)], total + row[2])
            else:
                totals[key] = totals.get(key, 0.0) + row[1]
            yield None
        for key, value in totals.items():
            yield (key, *value) if family.kind is Kind.HISTOGRAM else (key, value)

    return reduced, summed()


def _lines(sources: Sequence[MetricsSource], topic_level: bool) -> Iterator[str | None]:
    """The exposition's text, piece by piece (``None``: a row was read but nothing is written yet)."""
    labels = _Labels()
    for source in sources:
        for declared, declared_rows in source.families():
            if topic_level:
                family, rows = declared, iter(declared_rows)
            else:
                family, rows = _aggregated(declared, declared_rows)
            name = family.exposed_name
            yield f"# HELP {name} {escape_help(family.help)}\n# TYPE {name} {family.kind.value}\n"
            for row in rows:
                if row is None:
                    yield None
                elif family.kind is Kind.HISTOGRAM:
                    yield _histogram_text(family, labels, row)
                else:
                    yield f"{name}{labels.render(family.labels, row[0])} {format_value(row[1])}\n"


def _histogram_text(family: Family, labels: _Labels, row: HistogramRow) -> str:
    values, counts, total = row
    bounds = [*(format_value(b) for b in family.buckets), "+Inf"]
    out = []
    running = 0.0
    for bound, count in zip(bounds, counts, strict=True):
        running += count
        with_le = labels.with_le(family.labels, values, bound)
        out.append(f"{family.name}_bucket{with_le} {format_value(running)}\n")
    plain = labels.render(family.labels, values)
    out.append(f"{family.name}_count{plain} {format_value(running)}\n")
    out.append(f"{family.name}_sum{plain} {format_value(total)}\n")
    return "".join(out)


class Exposition:
    """The body of one ``/metrics`` answer: an async iterator of chunks, made step by step (see the module
    docstring). ``gzip`` compresses them (answer with ``Content-Encoding: gzip``)."""

    def __init__(
        self,
        sources: Sequence[MetricsSource],
        *,
        topic_level: bool = True,
        gzip: bool = False,
        chunk_bytes: int = 64 * 1024,
        step_ms: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._pieces = _lines(list(sources), topic_level)
        self._compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31) if gzip else None
        self._chunk_bytes = chunk_bytes
        self._step_s = step_ms / 1000
        self._clock = clock
        self._done = False

    def __aiter__(self) -> Exposition:
        return self

    async def __anext__(self) -> bytes:
        while not self._done:
            await trio.lowlevel.checkpoint()  # other tasks run between two steps, whoever consumes us
            chunk = self.step()
            if chunk:
                return chunk
        raise StopAsyncIteration

    def step(self) -> bytes:
        """Format the next chunk (bounded in bytes and in time); ``b""`` when nothing is ready yet."""
        deadline = self._clock() + self._step_s
        parts: list[str] = []
        size = 0
        for rows, piece in enumerate(self._pieces, 1):
            if piece is not None:
                parts.append(piece)
                size += len(piece)
                if size >= self._chunk_bytes:
                    break
            if rows % ROWS_PER_CLOCK_READ == 0 and self._clock() >= deadline:
                break
        else:
            self._done = True
        data = "".join(parts).encode()
        if self._compressor is None:
            return data
        out = self._compressor.compress(data)
        if self._done:
            out += self._compressor.flush()
        return out


def render_text(sources: Sequence[MetricsSource], *, topic_level: bool = True) -> str:
    """The whole exposition at once (tests and tools; a server streams :class:`Exposition`)."""
    return "".join(piece for piece in _lines(list(sources), topic_level) if piece is not None)
