"""Producers: one client producer on one topic (partition), whatever protocol it speaks.

A producer turns what its adapter hands it into :class:`~.publish.PublishRequest` objects - assigning sequence
ids and the publish time - and hands them to its topic's publish queue (:mod:`.publish_queue`); the queue
answers each request through :meth:`Producer.on_stored` / :meth:`Producer.on_failed`, and the producer passes
the answer on to the request's completion (the adapter's frame).

Ordering (Pulsar's guarantee for one producer): a producer's messages are stored and acknowledged in send
order - the topic appends them in arrival order and the managed ledger calls back in add order. When a request
fails, it and *every later request of the producer still pending* fail with it, so the client never sees "ok"
for a message sent after a failed one; callbacks arriving later for those requests are ignored. The producer
then goes on: new requests may succeed (as a Pulsar client producer keeps working after a failed send).
Requests sent *before* a failed one are not failed with it: they may be in flight, and are answered when their
write completes. A request whose write failed may or may not have been stored (the outcome of a failed add is
unknown), as in Pulsar; one refused before it was written (its topic closing, say) was not stored, so
resending
it creates no duplicate.

Back-pressure: the producers of one client session hold at most ``maxPendingMessages`` unacknowledged
messages together (:class:`Capacity`, capped by the broker's ``producer_pending_messages_max``); the adapter
waits for room before it reads the client's next request, so TCP slows the client down. Pulsar's WebSocket
producer answers an error instead (``blockIfQueueFull(false)``); waiting loses nothing and needs nothing of
the
client.

Publish rate (:mod:`.throttle`): a producer whose topic has a ``publishRate`` holds its topic's
:class:`~.throttle.PublishThrottle` (``throttle``; None without one, the only check on the way of a
publish). A publish that leaves the topic over its rate pauses the session's :class:`Capacity`: its limit
drops to 0, so the adapter's next look for room (which it makes before reading or handling the next
request) waits out the throttle's pause first - the session reads nothing meanwhile, as Pulsar stops reading
the connection. Nothing is refused.
Deduplication (:mod:`.dedup`): when the topic deduplicates, it sets :attr:`Producer.dedup` and each request
carries the client's sequence id (else the producer's next). A duplicate is not written: it is answered at
``-1:-1`` (``ledger_id``, ``entry_id``, ``first_index`` and ``batch_size`` -1: Pulsar's id of a duplicate)
once every request before it is answered (it waits in
:attr:`Producer.pending` with the :data:`~.publish.HELD` layout), so answers stay in send order; a resend of
a request still in flight *of this producer* waits likewise, one of another (an earlier session's) is refused
with Pulsar's "cannot determine" error. Without deduplication the publish path pays one attribute check.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.dedup import (
    DUPLICATE_UNKNOWN_REASON,
    SEQUENCE_ID_MAX,
    DedupState,
    Verdict,
)
from magnetar.broker.core.publish import (
    HELD,
    MESSAGES,
    CompactLayout,
    DelayedLayout,
    EntryLayout,
    PublishCompletion,
    PublishRequest,
)
from magnetar.broker.core.rates import Rate
from magnetar.broker.core.throttle import PublishThrottle
from magnetar.broker.core.topic_limits import TopicLimits, check_delivery_delay
from magnetar.broker.wire import INT64_MAX, ChunkInfo, format_timestamp


class Capacity:
    """Messages pending across the producers of one session, bounded by ``limit`` (0 while a publish rate
    pauses the session)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._limit = self.limit
        self.count = 0
        self._freed = trio.Event()
        self._paused_by: set[PublishThrottle] = set()
        """The throttles of the session's topics that are over their rate (one per topic at most)."""

    def pause(self, throttle: PublishThrottle) -> None:
        """``throttle``'s topic is over its rate: the session waits (:meth:`wait`, :meth:`wait_for`)."""
        self._paused_by.add(throttle)
        self.limit = 0

    async def _sit_out(self) -> None:
        # One wait per throttle: a topic still over its rate afterwards (other sessions published) pauses
        # the session again at its next publish.
        while self._paused_by:
            wait = self._paused_by.pop().pause_s(trio.current_time())
            if wait > 0:
                await trio.sleep(wait)
        self.limit = self._limit

    def taken(self, count: int = 1) -> None:
        self.count += count

    def returned(self, count: int = 1) -> None:
        self.count -= count
        if self.count < self.limit:
            self._freed.set()

    async def wait(self) -> None:
        if self._paused_by:
            await self._sit_out()
        while self.count >= self.limit:
            self._freed = trio.Event()
            await self._freed.wait()

    async def wait_for(self, count: int) -> None:
        """Room for ``count`` messages; a group larger than the limit goes alone (when nothing is pending)."""
        if self._paused_by:
            await self._sit_out()
        while self.count and self.count + count > self.limit:
            self._freed = trio.Event()
            await self._freed.wait()


class PublishTarget(Protocol):
    """Where a producer's requests go: its topic's publish queue (and the policies that bound them)."""

    @property
    def limits(self) -> TopicLimits: ...

    def publish(self, request: PublishRequest) -> None: ...


class Producer:
    """One producer on one topic (partition)."""

    def __init__(
        self,
        target: PublishTarget,
        name: str,
        capacity: Capacity,
        *,
        partition: int,
        clock: Clock,
        initial_sequence_id: int | None = None,
    ) -> None:
        self._target = target
        self.name = name
        self.capacity = capacity
        self.partition = partition
        """The topic's partition index (-1: not a partition), for the ids of what it stores."""
        self._clock = clock
        self._time_at = -1.0
        self._time_ms = 0
        """The publish time of the requests received at ``_time_at`` (one read of the clock per read)."""
        self.pending: deque[PublishRequest] = deque()
        self._sequence_id = -1 if initial_sequence_id is None else initial_sequence_id
        self.compact_layout = CompactLayout()
        """This producer's group key for compact messages (:mod:`.publish`)."""
        self.disconnect: Callable[[str], None] | None = None
        """Ends the client's session because the topic went away, so that the client looks it up again (set
        by the adapter, which says it in its own terms: a WebSocket closes with 1001)."""
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.rate_in = Rate()
        self.connected_since_ms = clock.time_ms()
        self.address = ""
        self.client_version = ""
        """What the stats call the client (``clientVersion``; the adapter names its protocol)."""
        self.access_mode = "Shared"
        """Pulsar's name of its access mode (:mod:`.producer_access`), set when the topic admits it."""
        self.topic_epoch: int | None = None
        """The topic epoch it was admitted with (exclusive modes only)."""
        self.schema_version = -1
        """The version of the schema it named in its topic's registry (-1: none), set by the adapter; its
        messages carry it."""
        self.throttle: PublishThrottle | None = None
        """Its topic's publish rate (set by the topic; None: none)."""
        self.dedup: DedupState | None = None
        """The topic's deduplication state, when it deduplicates (set by the topic)."""
        self._held = 0
        """Duplicates waiting in :attr:`pending` for the requests before them."""

    def publish(
        self,
        layout: EntryLayout,
        content: object,
        messages: int,
        payload_bytes: int,
        completion: PublishCompletion,
        tag: object,
        received_at: float,
        sequence_id: int | None = None,
        highest_sequence_id: int = -1,
    ) -> None:
        """Publish ``messages`` messages laid out by ``layout`` (see :class:`~.publish.PublishRequest`); the
        outcome goes to ``completion`` later (at once when the producer is closed). Their publish time is the
        clock's when the first request received at ``received_at`` was published: the requests an adapter
        received together (one read, one frame) share one reading of the clock. ``sequence_id`` (and
        ``highest_sequence_id``, a batch's last) is the client's, when it gave one: a deduplicated topic
        keys on it (see the module docstring)."""
        if received_at != self._time_at:
            self._time_at = received_at
            self._time_ms = self._clock.time_ms()
        request = PublishRequest(
            self,
            layout,
            content,
            messages,
            payload_bytes,
            self._sequence_id + 1,
            self._time_ms,
            completion,
            tag,
            received_at,
        )
        if self.closed:
            request.failed = True
            completion.failed(request, "Producer is closed")
            return
        if self.dedup is not None:
            if self._deduplicate(self.dedup, request, sequence_id, highest_sequence_id):
                return
        else:
            self._sequence_id += messages
        self.pending.append(request)
        self.capacity.count += messages  # Capacity.taken, in line (one per message published over JSON)
        self._target.publish(request)
        throttle = self.throttle
        if throttle is not None and throttle.record(messages, payload_bytes, received_at):
            self.capacity.pause(throttle)

    def publish_delayed(
        self,
        layout: EntryLayout,
        content: object,
        messages: int,
        payload_bytes: int,
        completion: PublishCompletion,
        tag: object,
        received_at: float,
        *,
        deliver_at_ms: int = 0,
        deliver_after_ms: int = 0,
        sequence_id: int | None = None,
        highest_sequence_id: int = -1,
        chunk: ChunkInfo | None = None,
    ) -> None:
        """:meth:`publish` of messages to be delivered no earlier than ``deliver_at_ms`` (epoch ms) or, when
        ``deliver_after_ms`` is above 0 (it wins, as a Pulsar client's later ``deliverAfter`` does),
        ``deliver_after_ms`` after now. ``layout`` is :data:`~.publish.MESSAGES` or a compact layout. A time
        not after now (0, negative) is no delay: the messages go as ``layout`` says. Delayed, they go in an
        entry of their own (:class:`~.publish.DelayedLayout`). Raises
        :class:`~.errors.DeliveryDelayTooLongError` (nothing published) when the delay exceeds the topic's
        ``maxDeliveryDelayInMillis``. With ``chunk`` (compact content: one chunk of a larger message) the
        entry is a chunk entry of its own, delayed or not."""
        now_ms = self._clock.time_ms()
        if deliver_after_ms > 0:
            deliver_at_ms = min(now_ms + deliver_after_ms, INT64_MAX)
        if deliver_at_ms > now_ms:
            check_delivery_delay(self._target.limits, deliver_at_ms - now_ms)
            layout = DelayedLayout(deliver_at_ms, compact=layout is not MESSAGES, chunk=chunk)
        elif chunk is not None:
            layout = DelayedLayout(0, compact=True, chunk=chunk)
        self.publish(
            layout,
            content,
            messages,
            payload_bytes,
            completion,
            tag,
            received_at,
            sequence_id,
            highest_sequence_id,
        )

    def attach_dedup(self, dedup: DedupState) -> None:
        """The topic deduplicates: number on from the highest sequence id it accepted of this name (as a
        Pulsar client does with PRODUCER_SUCCESS's ``last_sequence_id``)."""
        self.dedup = dedup
        dedup.producer_joined(self.name)
        last = dedup.last_sequence_id(self.name)
        self._sequence_id = max(self._sequence_id, last)

    def _deduplicate(
        self, dedup: DedupState, request: PublishRequest, sequence_id: int | None, highest: int
    ) -> bool:
        """The deduplicated publish: True when ``request`` was answered or held (not to be written)."""
        first = self._sequence_id + 1 if sequence_id is None else sequence_id
        last = max(highest, first + request.messages - 1)
        if not 0 <= first <= last <= SEQUENCE_ID_MAX:
            request.failed = True
            reason = f"sequence id {first} out of range (0 to {SEQUENCE_ID_MAX})"
            request.completion.failed(request, reason)
            return True
        request.sequence_id = first
        request.highest_sequence_id = last
        self._sequence_id = max(self._sequence_id, last)
        verdict = dedup.check(self.name, first, last)
        if verdict is Verdict.NEW:
            return False
        if verdict is Verdict.UNKNOWN and not any(
            r.layout is not HELD and r.sequence_id <= first <= getattr(r, "highest_sequence_id", -1)
            for r in self.pending
        ):
            request.completion.failed(request, DUPLICATE_UNKNOWN_REASON)
            return True
        if not self.pending:
            request.completion.stored(request, self.partition, -1, -1, -1, -1)
            return True
        request.layout = HELD
        self._held += 1
        self.capacity.count += request.messages
        self.pending.append(request)
        return True

    def on_stored(
        self, request: PublishRequest, ledger_id: int, entry_id: int, first_index: int, batch_size: int
    ) -> None:
        if request.failed:
            return
        head = self.pending.popleft()
        assert head is request, "a producer's messages are acknowledged in send order"
        count = request.messages
        self.capacity.returned(count)
        self.msg_in_counter += count
        self.bytes_in_counter += request.payload_bytes
        if self.dedup is not None:
            self._persisted(self.dedup, request, ledger_id, entry_id)
        request.completion.stored(request, self.partition, ledger_id, entry_id, first_index, batch_size)
        if self._held:
            self._answer_held()

    def _answer_held(self) -> None:
        """Answer the duplicates now at the head of :attr:`pending` (at ``-1:-1``)."""
        pending = self.pending
        while pending and pending[0].layout is HELD:
            held = pending.popleft()
            self._held -= 1
            self.capacity.returned(held.messages)
            held.completion.stored(held, self.partition, -1, -1, -1, -1)

    def _persisted(self, dedup: DedupState, request: PublishRequest, ledger_id: int, entry_id: int) -> None:
        highest: int | None = getattr(request, "highest_sequence_id", None)
        if highest is None:  # published before the topic began to deduplicate
            return
        if dedup.on_persisted(self.name, highest, ledger_id, entry_id):
            dedup.snapshot_due()

    def on_failed(self, request: PublishRequest, reason: str) -> None:
        """``request`` failed: it and every later pending request of this producer fail. Earlier ones stay
        pending (they may be in flight and get stored: they are answered when their write completes)."""
        if request.failed:
            return
        queue = self.pending
        try:
            first = queue.index(request)  # identity: requests compare by identity
        except ValueError:
            return
        failed = [queue.pop() for _ in range(len(queue) - first)]
        failed.reverse()
        count = 0
        for item in failed:
            item.failed = True
            count += item.messages
            if item.layout is HELD:
                self._held -= 1
            item.completion.failed(item, reason)
        self.capacity.returned(count)
        if self.dedup is not None:
            in_flight = [getattr(r, "highest_sequence_id", -1) for r in queue if r.layout is not HELD]
            self.dedup.on_failed(self.name, max(in_flight, default=-1))

    def close(self) -> None:
        self.closed = True

    def go_away(self, reason: str) -> None:
        """The topic goes away (unloaded, terminated, lost): no more publishing, and the session ends."""
        self.closed = True
        if self.disconnect is not None:
            self.disconnect(reason)

    def stats(self) -> dict[str, object]:
        return {
            "producerName": self.name,
            "msgRateIn": self.rate_in.msgs_per_s,
            "msgThroughputIn": self.rate_in.bytes_per_s,
            "averageMsgSize": self.bytes_in_counter / self.msg_in_counter if self.msg_in_counter else 0.0,
            "msgInCounter": self.msg_in_counter,
            "bytesInCounter": self.bytes_in_counter,
            "accessMode": self.access_mode,
            "address": self.address,
            "connectedSince": format_timestamp(self.connected_since_ms),
            "clientVersion": self.client_version,
            "metadata": {},
        }
