"""The executor side: one Spark partition of a batch, read from the owning broker through range reads.

:class:`RangePartition` carries everything ``read()`` needs (Spark pickles it to the executor): the topic
partition and the per-ledger segments of entries to read, as planned on the driver. :func:`read_partition`
requests each segment in pieces of at most ``RANGE_REQUEST_ENTRIES`` entries from
``GET .../entries?frameVersion=3`` (the client is created in the worker process and reused by the tasks it
runs) and yields one Arrow record batch per response.

Data loss. Planning knew every entry of a segment to be stored, and entries vanish only as whole ledgers, so
each response must start exactly at the requested entry. When it does not (retention or a truncate deleted
the ledger after planning), :func:`report_loss` fails the task with a message saying what was lost, or -
with ``failOnDataLoss=false`` - logs a warning and carries on with what is still stored. This is the check
Pulsar's connector makes with "Potential Data Loss: intended to start at ...".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition

from magnetar.admin.spark.client import MagnetarSourceError, shared_client
from magnetar.admin.spark.options import FAIL_ON_DATA_LOSS, SourceOptions
from magnetar.admin.spark.planner import Segment
from magnetar.admin.spark.rows import decode_body, record_batch
from magnetar.admin.spark.topics import TopicPartition

log = logging.getLogger("magnetar.spark")

RANGE_REQUEST_ENTRIES = 10_000
"""Entries asked for by one range read (the endpoint's own bound, ``RANGE_ENTRIES_MAX``)."""


class DataLossError(MagnetarSourceError):
    pass


def report_loss(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            f"magnetar: data loss: {message}. Set {FAIL_ON_DATA_LOSS}=false to skip what was lost and go on."
        )
    log.warning("magnetar: data loss: %s; skipped (%s=false)", message, FAIL_ON_DATA_LOSS)


class RangePartition(InputPartition):
    """One Spark partition: entries of one topic partition, as segments of single ledgers."""

    def __init__(self, partition: TopicPartition, segments: tuple[Segment, ...]) -> None:
        super().__init__(partition.name)
        self.partition = partition
        self.segments = segments

    @property
    def entries(self) -> int:
        return sum(segment.entries for segment in self.segments)


def read_partition(options: SourceOptions, split: InputPartition) -> Iterator[Any]:
    """The messages of ``split`` as ``pyarrow.RecordBatch`` es (nothing for a placeholder partition)."""
    if not isinstance(split, RangePartition):
        return
    client = shared_client(options.service_url, options.request_timeout_s)
    part = split.partition
    topic = part.topic_name
    for segment in split.segments:
        ledger, first, last = segment.ledger_id, segment.first_entry, segment.last_entry
        while first <= last:
            count = min(RANGE_REQUEST_ENTRIES, last - first + 1)
            decoded = decode_body(
                client.read_range(topic, (ledger, first), (ledger, last), count), part.index
            )
            if decoded.first_entry != (ledger, first):
                found = decoded.first_entry
                report_loss(
                    options,
                    f"{part.name}: entries {ledger}:{first}..{ledger}:{last} were planned but "
                    + (f"the first stored one is {found[0]}:{found[1]}" if found else "are no longer stored"),
                )
            if len(decoded.columns):
                yield record_batch(decoded.columns, part.topic, part.index)
            following = decoded.end.next_position
            if decoded.end.complete or decoded.first_entry is None or following[0] != ledger:
                break
            if following[1] <= first:
                raise MagnetarSourceError(f"{part.name}: the broker made no progress at {ledger}:{first}")
            first = following[1]
