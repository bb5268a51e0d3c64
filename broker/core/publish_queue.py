"""A topic's one publish path: the queue of publish requests waiting to be written, cut into entries.

Requests (:class:`~.publish.PublishRequest`) are written in arrival order. Consecutive requests with the same
:class:`~.publish.EntryLayout` (their group key) form one *group*, written as one entry, within
``publish_batch_messages_max`` messages and ``publish_batch_bytes_max`` payload bytes. When nothing is in
flight to the bookies a request is written at once, in an entry of its own; otherwise arriving requests gather
in the open group, which is written when an in-flight entry completes, or earlier - pipelined next to the
entries in flight, up to ``publish_inflight_entries_max`` of them - once it holds
``publish_pipeline_batch_messages_min`` messages (or a quarter of ``publish_batch_bytes_max`` bytes), and at
once, whatever is in flight, when it is *full*: when it reached ``publish_batch_messages_max`` messages, or
the next request would take it past either limit. A group closed because the next request has another layout
is not full: it waits for its turn like the open group, and the groups after it wait behind it (arrival
order). So a quiet topic writes one message per entry (lowest latency), a topic at a moderate rate writes one
entry per bookie round trip (little CPU per message, hence a short tail on a busy host), and a saturated one
pipelines full entries (throughput).

With the layouts of today: Pulsar JSON messages of any producers share one batch entry; a ``magnetar.v1``
producer's runs that waited beside each other share one compact entry, and runs of another producer in
between start entries of their own. A request whose layout is ``alone`` (a Pulsar binary SEND: the client
numbered its messages from 0, so its entry holds exactly them) never gathers others: its group is full as it
arrives, written at once behind the groups before it, pipelined with whatever is in flight (the client
batched already; the bookies' journal group-commits the entries in flight together). Without that, one
unbatched producer wrote one message per bookie round trip (about 1,000 msgs/s in the standalone).

Every request is answered once, through its producer (:meth:`~.producer.Producer.on_stored` /
:meth:`~.producer.Producer.on_failed`): stored - where - or failed. Closing writes what was accepted
(:meth:`PublishQueue.write_waiting`); fencing fails what was not written yet
(:meth:`PublishQueue.fail_waiting`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.publish import EntryLayout, PublishRequest
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.managed_ledger.errors import (
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
)
from magnetar.managed_ledger.position import Position

log = logging.getLogger(__name__)

AddCallback = Callable[[Position | ManagedLedgerError], None]


class EntryLog(Protocol):
    """Where entries go: the topic's managed ledger."""

    def add_entry_nowait(self, data: bytes, callback: AddCallback, messages: int = 1) -> None: ...


class PublishSettings(Protocol):
    """The batching settings (``BrokerSettings`` has them)."""

    @property
    def publish_batch_messages_max(self) -> int: ...

    @property
    def publish_batch_bytes_max(self) -> int: ...

    @property
    def publish_inflight_entries_max(self) -> int: ...

    @property
    def publish_pipeline_batch_messages_min(self) -> int: ...


class _Group:
    """Requests closed into one future entry, waiting for their turn."""

    __slots__ = ("full", "layout", "messages", "payload_bytes", "requests")

    def __init__(
        self,
        layout: EntryLayout,
        requests: list[PublishRequest],
        messages: int,
        payload_bytes: int,
        full: bool,
    ) -> None:
        self.layout = layout
        self.requests = requests
        self.messages = messages
        self.payload_bytes = payload_bytes
        self.full = full


class PublishQueue:
    """The publish requests of one topic (partition) on their way to its managed ledger."""

    def __init__(
        self,
        topic_name: str,
        ml: EntryLog,
        settings: PublishSettings,
        clock: Clock,
        metrics: TopicMetrics,
        *,
        on_stored: Callable[[], None],
        on_fenced: Callable[[], None],
    ) -> None:
        self._topic_name = topic_name
        self._ml = ml
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._on_stored = on_stored
        """Entries were stored: wake the dispatchers."""
        self._on_fenced = on_fenced
        self._groups: deque[_Group] = deque()
        """Closed groups waiting for their turn, in arrival order (before the open group)."""
        self._open: list[PublishRequest] = []
        self._open_layout: EntryLayout | None = None
        self._open_messages = 0
        self._open_bytes = 0
        self._inflight = 0
        self.drained = trio.Event()
        """Set while no entry is in flight."""
        self.drained.set()
        self.closed = False
        """No more requests are accepted (the topic is closing or fenced)."""

    def publish(self, request: PublishRequest) -> None:
        """Queue ``request``, writing whatever may be written now (see the module docstring)."""
        if self.closed:
            request.producer.on_failed(request, f"Topic {self._topic_name} is being unloaded")
            return
        if request.layout.alone:
            if self._open:
                self._close_open(full=False)
            self._groups.append(
                _Group(request.layout, [request], request.messages, request.payload_bytes, True)
            )
            self._write_ready()
            return
        settings = self._settings
        messages_max = settings.publish_batch_messages_max
        open_group = self._open
        if open_group:
            over = (
                self._open_messages + request.messages > messages_max
                or self._open_bytes + request.payload_bytes > settings.publish_batch_bytes_max
            )
            if over or request.layout is not self._open_layout:
                self._close_open(full=over)
                open_group = self._open
        if not open_group:
            self._open_layout = request.layout
        open_group.append(request)
        self._open_messages += request.messages
        self._open_bytes += request.payload_bytes
        if self._open_messages >= messages_max:
            self._close_open(full=True)
        elif not self._groups and self._inflight >= settings.publish_inflight_entries_max:
            return  # no closed group waits, and the open one may not be written with this much in flight
        self._write_ready()

    def _close_open(self, *, full: bool) -> None:
        assert self._open_layout is not None
        group = _Group(self._open_layout, self._open, self._open_messages, self._open_bytes, full)
        self._groups.append(group)
        self._open = []
        self._open_messages = self._open_bytes = 0

    def _may_write(self, messages: int, payload_bytes: int) -> bool:
        """Whether a group that is not full may be written now (see the module docstring)."""
        if self._inflight == 0:
            return True
        settings = self._settings
        return self._inflight < settings.publish_inflight_entries_max and (
            messages >= settings.publish_pipeline_batch_messages_min
            or payload_bytes * 4 >= settings.publish_batch_bytes_max
        )

    def _write_ready(self) -> None:
        """Write the groups whose turn it is, in order; a group that may not be written yet stops it."""
        groups = self._groups
        while groups:
            group = groups[0]
            if not group.full and not self._may_write(group.messages, group.payload_bytes):
                return
            groups.popleft()
            self._write(group.layout, group.requests, group.messages)
        if self._open and self._may_write(self._open_messages, self._open_bytes):
            self._write_open()

    def _write_open(self) -> None:
        layout, requests, messages = self._open_layout, self._open, self._open_messages
        assert layout is not None
        self._open = []
        self._open_messages = self._open_bytes = 0
        self._write(layout, requests, messages)

    def write_waiting(self) -> None:
        """Write everything accepted and not written yet, whatever is in flight (closing)."""
        while self._groups:
            group = self._groups.popleft()
            self._write(group.layout, group.requests, group.messages)
        if self._open:
            self._write_open()

    def fail_waiting(self, reason: str) -> None:
        """Fail the requests accepted but not written yet (and, per producer, those sent after them)."""
        waiting = [request for group in self._groups for request in group.requests]
        waiting += self._open
        self._groups.clear()
        self._open = []
        self._open_messages = self._open_bytes = 0
        for request in waiting:
            request.producer.on_failed(request, f"Topic {self._topic_name} is closing: {reason}")

    def _write(self, layout: EntryLayout, requests: list[PublishRequest], messages: int) -> None:
        group = [request for request in requests if not request.failed]
        if not group:
            return
        if len(group) != len(requests):
            messages = sum(request.messages for request in group)
        data, batched = layout.encode(group, messages, self._clock.time_ms())
        self._inflight += 1
        if self.drained.is_set():
            self.drained = trio.Event()

        def on_added(result: Position | ManagedLedgerError) -> None:
            self._on_added(group, messages, batched, len(data), result)

        self._ml.add_entry_nowait(data, on_added, messages)

    def _on_added(
        self,
        group: list[PublishRequest],
        messages: int,
        batched: bool,
        data_bytes: int,
        result: Position | ManagedLedgerError,
    ) -> None:
        """The one completion of every entry written: each request answered through its producer."""
        self._inflight -= 1
        if isinstance(result, Position):
            ledger_id, entry_id = result.ledger_id, result.entry_id
            if batched:
                index = 0
                for request in group:
                    request.producer.on_stored(request, ledger_id, entry_id, index, messages)
                    index += request.messages
            else:
                request = group[0]
                request.producer.on_stored(request, ledger_id, entry_id, -1, 0)
            self._metrics.on_entry_stored(group, data_bytes, trio.current_time())
            self._on_stored()
        else:
            reason = _describe_failure(result)
            for request in group:
                request.producer.on_failed(request, reason)
            if isinstance(result, ManagedLedgerFencedError) and not self.closed:
                log.warning("topic %s: managed ledger fenced by another owner", self._topic_name)
                self._on_fenced()
        if not self.closed:
            self._write_ready()
        if self._inflight == 0:
            self.drained.set()


def _describe_failure(error: ManagedLedgerError) -> str:
    if isinstance(error, ManagedLedgerTerminatedError):
        return "org.apache.pulsar.client.api.PulsarClientException$TopicTerminatedException: topic terminated"
    if isinstance(error, ManagedLedgerFencedError):
        return "Topic ownership moved to another broker: reconnect"
    return f"Failed to persist message: {error}"
