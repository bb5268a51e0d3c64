"""Dispatch: moving a subscription's messages to its consumers (Pulsar's ``PersistentDispatcher*``).

One task per subscription runs :meth:`Dispatcher.run`. Each round it first hands out messages waiting for
redelivery (in position order), then messages already read, and only when consumers still have permits reads
the next entries from the cursor - at most ``min(permits, dispatch_read_entries_max)`` entries, so it never
holds more than the permits' worth of entries (an entry holds at least one message). Delivery itself is a
synchronous push into the consumer's bounded delivery sink (:mod:`.delivery`): for the single active consumer
of an Exclusive or Failover subscription, the whole run of ready messages it may take at once
(:meth:`DispatchSource.push_many`, rendered by the sink in one pass, docs/architecture.md §2.2); for Shared
and Key_Shared, which choose a consumer per message, one at a time. The task sleeps on one event, woken by
new entries, released permits, consumer changes and redeliveries.

Subscription types:

* **Exclusive** - one consumer; a second one is refused (``ConsumerBusy``, 409).
* **Failover** - one *active* consumer: among the consumers of the best (lowest) ``priorityLevel``, sorted by
  name, the one at ``partition % count`` (index 0 for a non-partitioned topic). When the active consumer
  changes, everything unacknowledged is delivered again to the new one from the mark-delete position on
  (the cursor rewinds; acknowledged messages are skipped).
* **Shared** - round robin over the consumers with permits; a consumer that leaves hands its unacknowledged
  messages back for redelivery to the others.
* **Key_Shared** - a message goes to the consumer owning its key's slot (:mod:`.key_shared`: on a
  consistent-hash ring, or in the consumer's own sticky hash ranges; a slot no sticky consumer covers is held
  in the redelivery set until one does). Per-key
  order is kept while consumers join and leave with Pulsar's "draining hashes" rule (PIP-379): a message
  whose slot still has unacknowledged messages pending at *another* consumer is not delivered yet; it waits
  in the redelivery set, and every later message of that slot waits behind it.

A consumer may take **whole entries** (:attr:`~.consumer.Consumer.whole_entries`, Pulsar's dispatch, which
Pulsar's binary protocol needs: a client numbers the messages of a batch MESSAGE itself and cannot tell two
MESSAGEs of one entry apart): the messages of a stored entry still to deliver then go to it together, in one
round, even past its permits (they go negative, as Pulsar's do; the overshoot is at most one entry). On a
Key_Shared subscription, the messages of an entry that go to one consumer (by their keys) go together.

Delayed delivery (Pulsar's ``deliverAt``): a Shared or Key_Shared subscription does not deliver an entry whose
deliver-at time is still ahead when it reads it; the entry's position goes into the subscription's
:class:`~.delayed_tracker.DelayedTracker` (made on the first delayed entry) and the cursor reads on. Each
round, due positions are re-read (:meth:`DispatchSource.read_positions`) and delivered as read messages are,
before any new entry is read; between rounds the task sleeps at most until the next one is due. While the
tracker is full (``dispatch_delayed_messages_max``) no new entries are read. A rewind forgets the tracker:
the cursor reads those entries again and they are tracked again, which is also how the tracker is rebuilt
after a restart. Exclusive and Failover subscriptions, and every subscription while the policy turns
delayed delivery off, deliver at once (what was tracked is released). Without delayed entries the data path
costs one attribute check per entry read and one per round.

Negative acks and ack timeouts put messages into the redelivery set (the single-active types keep them in
position order there too, instead of Pulsar's rewind of the whole cursor, so in-flight messages are not
duplicated). Reading stops while the redelivery set holds ``dispatch_redelivery_messages_max`` messages.

Dispatch rates (``dispatchRate`` of the topic, ``subscriptionDispatchRate`` or the subscription's own;
:mod:`.throttle`): with ``throttle`` set (None without a rate: the one check a read makes), a read asks for
no more messages than every limiter has tokens left, and what it dispatched is taken from them (messages
and bytes); with no tokens left the read is rescheduled for when there are. Messages already read and
redeliveries are not held back (they were counted when read).
"""

from __future__ import annotations

import bisect
import logging
import math
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delayed_tracker import DelayedTracker
from magnetar.broker.core.delivery import Delivery, MsgKey
from magnetar.broker.core.errors import ConsumerBusyError
from magnetar.broker.core.key_shared import KeySharedSelector
from magnetar.broker.core.throttle import (
    DispatchLimiter,
    ThrottledEvents,
    dispatch_allowance,
    dispatch_consumed,
    dispatch_wait_s,
)
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.errors import (
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
)

log = logging.getLogger(__name__)

READ_RETRY_DELAY_S = 0.2
"""Pause before reading again after a failed read (a bookie hiccup)."""


class SubscriptionType(StrEnum):
    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"
    FAILOVER = "Failover"
    KEY_SHARED = "Key_Shared"

    @property
    def single_active(self) -> bool:
        return self in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER)


_NEVER_MS = 2**63 - 1


def pick_active(consumers: list[Consumer], partition: int) -> Consumer | None:
    """The active consumer of a Failover (or Exclusive) subscription, as Pulsar picks it: among the
    consumers of the best (lowest) priority level, sorted by name, the one at the partition index modulo
    their number (a non-partitioned topic: the first); None without consumers."""
    if not consumers:
        return None
    best = min(c.priority_level for c in consumers)
    candidates = sorted((c for c in consumers if c.priority_level == best), key=lambda c: c.name)
    return candidates[max(partition, 0) % len(candidates)]


class DispatchSource(Protocol):
    """What a dispatcher needs of its subscription: the cursor it reads, the messages of an entry still to
    deliver, and the push that counts and sends one."""

    @property
    def name(self) -> str: ...

    @property
    def cursor(self) -> ManagedCursor: ...

    def deliveries_of(self, entry: Entry) -> list[Delivery]: ...

    def push(self, consumer: Consumer, delivery: Delivery, now: float) -> None: ...

    def push_many(self, consumer: Consumer, deliveries: list[Delivery], now: float) -> int: ...

    def acked(self, delivery: Delivery) -> bool: ...

    async def read_positions(self, positions: list[tuple[int, int]]) -> list[Entry]: ...


class Dispatcher:
    def __init__(
        self,
        subscription: DispatchSource,
        *,
        partition: int,
        read_entries_max: int,
        redelivery_max: int,
        time_ms: Callable[[], int],
        delayed_max: int = 1_000_000,
    ) -> None:
        self._sub = subscription
        self._partition = partition
        self._read_entries_max = read_entries_max
        self._redelivery_max = redelivery_max
        self._time_ms = time_ms
        """Epoch milliseconds (the subscription's clock): deliver-at times are compared with it."""
        self._delayed_max = delayed_max
        self.delayed: DelayedTracker | None = None
        """Delayed entries held back (see the module docstring); None until the first one."""
        self.delay_enabled = True
        self.delay_tick_ms = 1000
        self.unacked_max = 0
        """Pulsar's ``maxUnackedMessagesPerSubscription`` (0: none): at this many unacknowledged messages
        over all consumers the subscription gets nothing more until they are below half of it."""
        self.blocked_on_unacked = False
        self._blocked = True
        """The last round stopped at something that wakes the task (no consumer, no permits, messages still
        ready): it waits for that, not for the next delayed entry's time."""
        self.type: SubscriptionType | None = None
        self.consumers: list[Consumer] = []
        self.active: Consumer | None = None
        self._ready: deque[Delivery] = deque()
        self._redeliver: dict[MsgKey, Delivery] = {}
        self._redeliver_keys: list[MsgKey] = []
        self._redeliver_slots: dict[int, int] = {}
        self._slot_pending: dict[int, list[int]] = {}
        """Key_Shared: slot -> [consumer id, unacknowledged messages of that slot it holds]."""
        self._ring = KeySharedSelector()
        self._given: dict[int, tuple[int, int]] = {}
        """Key_Shared, this round: the entry each whole-entry consumer was last given (the rest of that
        entry's messages for it go too, past its permits)."""
        self._rr = 0
        self._generation = 0
        self._wake = trio.Event()
        self._closed = False
        self.throttle: tuple[DispatchLimiter, ...] | None = None
        """The dispatch rates that bound its reads (the topic's and its own), set by the topic."""
        self.subscription_limiter: DispatchLimiter | None = None
        """Its own dispatch rate (part of ``throttle``), kept by the topic across changes of the topic's."""
        self._throttled_s = 0.0
        """How long the last step found the reads held by ``throttle`` (0: not held)."""
        self.throttled_events = ThrottledEvents()
        """Reads ``throttle`` held back or cut short (the subscription's stats)."""

    # -- consumers --------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        if self.consumers and sub_type is not self.type:
            raise ConsumerBusyError("Subscription is of different type")
        if sub_type is SubscriptionType.EXCLUSIVE and self.consumers:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        if sub_type is SubscriptionType.KEY_SHARED:  # may refuse it (mode, ranges): before anything changes
            self._ring.add(consumer.id, consumer.name, consumer.key_shared, consumer)
        self.type = sub_type
        self.consumers.append(consumer)
        consumer.flow.add_listener(self.wake)
        consumer.sink.add_listener(self.wake)  # room again in a full outbound queue
        if sub_type.single_active:
            self._pick_active()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        held = consumer.detach()
        if self.type is SubscriptionType.KEY_SHARED:
            self._ring.remove(consumer.id)
            for slot in [s for s, (owner, _) in self._slot_pending.items() if owner == consumer.id]:
                del self._slot_pending[slot]
        if self.type is not None and self.type.single_active:
            self._pick_active()
        else:
            self.redeliver(held)
        self.wake()

    def _pick_active(self) -> None:
        chosen = pick_active(self.consumers, self._partition)
        if chosen is None:
            self.active = None
            return
        if chosen is self.active:
            return
        previous, self.active = self.active, chosen
        if previous is not None:
            log.info("subscription %s: active consumer %s -> %s", self._sub.name, previous.name, chosen.name)
        for consumer in self.consumers:
            if consumer is not chosen:
                consumer.clear_pending()
        self.rewind()  # the new active consumer gets everything unacknowledged

    def rewind(self) -> None:
        """Deliver everything unacknowledged again from the mark-delete position on."""
        self._generation += 1
        if self.delayed is not None:
            self.delayed.clear()  # the cursor reads them again: they are tracked again
        self._ready.clear()
        self._redeliver.clear()
        self._redeliver_keys.clear()
        self._redeliver_slots.clear()
        self._sub.cursor.rewind()
        self.wake()

    # -- events -----------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def redeliver(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            key = delivery.key
            if key in self._redeliver or self._sub.acked(delivery):  # acked through another copy of it
                continue
            self._redeliver[key] = delivery
            bisect.insort(self._redeliver_keys, key)
            if self.type is SubscriptionType.KEY_SHARED:
                self._redeliver_slots[delivery.slot] = self._redeliver_slots.get(delivery.slot, 0) + 1
        if deliveries:
            self.wake()

    def forget(self, key: MsgKey) -> None:
        """A message waiting for redelivery was acknowledged meanwhile."""
        delivery = self._redeliver.pop(key, None)
        if delivery is not None:
            index = bisect.bisect_left(self._redeliver_keys, key)
            del self._redeliver_keys[index]
            self._drop_redeliver_slot(delivery.slot)

    def on_released(self, consumer: Consumer, delivery: Delivery) -> None:
        """A pending message left ``consumer`` (ack, nack, timeout): Key_Shared slot bookkeeping."""
        if self.type is not SubscriptionType.KEY_SHARED:
            return
        holder = self._slot_pending.get(delivery.slot)
        if holder is not None and holder[0] == consumer.id:
            holder[1] -= 1
            if holder[1] <= 0:
                del self._slot_pending[delivery.slot]
                if self._redeliver:
                    self.wake()

    @property
    def redelivery_count(self) -> int:
        return len(self._redeliver)

    # -- delayed delivery ---------------------------------------------------------------------------

    def set_delay_policy(self, enabled: bool, tick_ms: int) -> None:
        """The topic's delayed-delivery policy (at creation and on every change): off releases what is
        tracked (delivered at once), a new tick applies to the entries tracked from now on."""
        self.delay_enabled = enabled
        self.delay_tick_ms = tick_ms
        if self.delayed is not None:
            self.delayed.tick_ms = max(1, tick_ms)
            if not enabled and len(self.delayed):
                self.wake()

    @property
    def delayed_count(self) -> int:
        """Entries held back for delayed delivery now."""
        return len(self.delayed) if self.delayed is not None else 0

    def hold(self, deliver_at_ms: int, ledger_id: int, entry_id: int) -> bool:
        """Whether the entry read at ``(ledger_id, entry_id)``, to be delivered no earlier than
        ``deliver_at_ms``, is held back (then tracked); False: deliver it now."""
        sub_type = self.type
        if not self.delay_enabled or sub_type is None or sub_type.single_active:
            return False
        if deliver_at_ms <= self._time_ms():
            return False
        tracker = self.delayed
        if tracker is None:
            tracker = self.delayed = DelayedTracker(self.delay_tick_ms, self._delayed_max)
        tracker.add(deliver_at_ms, ledger_id, entry_id)
        return True

    def _due_delayed(self, tracker: DelayedTracker, limit: int) -> list[tuple[int, int]]:
        sub_type = self.type
        holding = self.delay_enabled and sub_type is not None and not sub_type.single_active
        return tracker.pop_due(self._time_ms() if holding else _NEVER_MS, limit)

    async def _replay_delayed(self, tracker: DelayedTracker, due: list[tuple[int, int]]) -> None:
        """Re-read the due delayed entries and make their messages ready; on a failed read they are due
        again (tracked anew), so none is lost."""
        generation = self._generation
        try:
            entries = await self._sub.read_positions(due)
        except BaseException:
            if generation == self._generation:
                for ledger_id, entry_id in due:
                    tracker.add(1, ledger_id, entry_id)
            raise
        if generation != self._generation:
            return  # rewound meanwhile: the cursor reads them again
        for entry in entries:
            self._ready.extend(self._sub.deliveries_of(entry))
        self._dispatch_ready()

    def _sleep_s(self) -> float:
        """How long the task may sleep before a delayed entry is due (inf: none tracked). Only asked when
        the round was not blocked by what wakes the task anyway (no permits, messages still ready)."""
        tracker = self.delayed
        due = tracker.next_due_ms() if tracker is not None else None
        if due is None:
            return float("inf")
        return max(0.0, (due - self._time_ms()) / 1000)

    # -- the dispatch task --------------------------------------------------------------------------

    async def run(self) -> None:
        while not self._closed:
            self._wake = trio.Event()
            try:
                progressed = await self._step()
            except (ManagedLedgerClosedError, ManagedLedgerFencedError):
                return
            except (ManagedLedgerError, BKError) as exc:
                log.warning("subscription %s: reading failed: %s", self._sub.name, exc)
                await trio.sleep(READ_RETRY_DELAY_S)
                continue
            except Exception:  # a fault of ours: this subscription's clients go, the broker stays
                log.exception(
                    "subscription %s: dispatching failed; its consumers are disconnected and what they had"
                    " not acknowledged is delivered again",
                    self._sub.name,
                )
                self._fail_consumers()
                await trio.sleep(READ_RETRY_DELAY_S)
                continue
            if not progressed:
                timeout = math.inf
                if self.delayed is not None and not self._blocked:
                    timeout = self._sleep_s()  # the next delayed entry's time
                if self._throttled_s > 0:
                    timeout = min(timeout, self._throttled_s)  # the dispatch rate's next tokens
                    self._throttled_s = 0.0
                with trio.move_on_after(timeout):
                    await self._wake.wait()

    def _fail_consumers(self) -> None:
        """After an unexpected fault in a round: end every consumer's session (each adapter closes it in its
        own terms, and the client subscribes again) and deliver everything unacknowledged again."""
        for consumer in list(self.consumers):
            if consumer.disconnect is not None:
                consumer.disconnect("Internal error while dispatching: subscribe again")
        self.rewind()

    async def _step(self) -> bool:
        self._blocked = True
        if not self.consumers or self.type is None:
            return False
        self._dispatch_redeliveries()
        self._dispatch_ready()
        if self._ready or len(self._redeliver) >= self._redelivery_max:
            return False
        permits = self._permits()
        if permits <= 0:
            return False
        self._blocked = False
        tracker = self.delayed
        if tracker is not None and len(tracker):
            due = self._due_delayed(tracker, min(permits, self._read_entries_max))
            if due:
                await self._replay_delayed(tracker, due)
                return True
            if tracker.full:
                return False  # no reading ahead until some are released
        cursor = self._sub.cursor
        if not cursor.has_more_entries():
            return False
        wanted = min(permits, self._read_entries_max)
        throttle = self.throttle
        if throttle is not None:
            now = trio.current_time()
            wanted = dispatch_allowance(throttle, wanted, now, self.throttled_events)
            if wanted <= 0:
                self._throttled_s = dispatch_wait_s(throttle, now)
                return False
        generation = self._generation
        entries = await cursor.read_entries(wanted)
        if generation != self._generation:
            return True  # rewound meanwhile: what was read is stale
        before = len(self._ready) if throttle is not None else 0
        for entry in entries:
            self._ready.extend(self._sub.deliveries_of(entry))
        if throttle is not None:
            size = sum(len(entry.data) for entry in entries)
            dispatch_consumed(throttle, len(self._ready) - before, size, trio.current_time())
        self._dispatch_ready()
        return True

    def _permits(self) -> int:
        if self.type is not None and self.type.single_active:
            return self.active.available() if self.active is not None else 0
        permits = sum(max(0, c.available()) for c in self.consumers)
        if self.unacked_max and permits > 0:  # Shared and Key_Shared only, as Pulsar's
            return self._within_unacked_max(permits)
        return permits

    def set_unacked_max(self, limit: int) -> None:
        """The policy's ``maxUnackedMessagesPerSubscription`` changed (0: none)."""
        if limit != self.unacked_max:
            self.unacked_max = limit
            self.blocked_on_unacked = False
            self.wake()

    def _within_unacked_max(self, permits: int) -> int:
        """``permits`` capped by the subscription's unacknowledged-message bound, as Pulsar's: blocked once
        the consumers hold ``unacked_max`` unacknowledged messages together, unblocked below half of it."""
        unacked = sum(len(c.pending) for c in self.consumers)
        limit = self.unacked_max
        if (self.blocked_on_unacked and unacked >= limit // 2) or unacked >= limit:
            if not self.blocked_on_unacked:
                self.blocked_on_unacked = True
                log.info("subscription %s: blocked at %d unacknowledged messages", self._sub.name, unacked)
            for consumer in self.consumers:
                consumer.hold_for_unacked()  # an ack wakes the task
            return 0
        self.blocked_on_unacked = False
        return min(permits, limit - unacked)

    # -- routing -----------------------------------------------------------------------------------

    def _dispatch_ready(self) -> None:
        ready = self._ready
        if not ready:
            return
        now = trio.current_time()  # once: every message pushed now was sent now (the ack timeout's start)
        if self.type is SubscriptionType.KEY_SHARED:
            self._given.clear()
            while ready:
                delivery = ready.popleft()
                if self._redeliver_slots.get(delivery.slot) or not self._try_key_shared(delivery, now):
                    self.redeliver([delivery])
            return
        if self.type is not None and self.type.single_active:
            active = self.active
            if active is None:
                return
            available = active.available()
            if available <= 0 or active.sink.bytes >= active.sink.bytes_max:
                return
            # One run to the active consumer: its sink renders the run in one pass and stops after the
            # message that fills its bytes (a few large messages fill it); the rest stays ready.
            if len(ready) <= available:
                run = list(ready)
                ready.clear()
            else:
                run = [ready.popleft() for _ in range(available)]
                if active.whole_entries:
                    _take_rest_of_entry(ready, run)
            taken = self._sub.push_many(active, run, now)
            if taken < len(run):
                ready.extendleft(reversed(run[taken:]))
            return
        push = self._sub.push
        while ready:
            consumer = self._next_shared_consumer()
            if consumer is None:
                return
            delivery = ready.popleft()
            push(consumer, delivery, now)
            if consumer.whole_entries:  # the rest of the entry goes along, whatever the permits
                while (
                    ready
                    and ready[0].entry_id == delivery.entry_id
                    and ready[0].ledger_id == delivery.ledger_id
                ):
                    push(consumer, ready.popleft(), now)

    def _next_shared_consumer(self) -> Consumer | None:
        count = len(self.consumers)
        for step in range(count):
            consumer = self.consumers[(self._rr + step) % count]
            if consumer.available() > 0:
                self._rr = (self._rr + step + 1) % count
                return consumer
        return None

    def _try_key_shared(self, delivery: Delivery, now: float) -> bool:
        consumer = self._ring.select(delivery.slot)
        if not isinstance(consumer, Consumer):
            return False
        entry = (delivery.ledger_id, delivery.entry_id)
        continuing = consumer.whole_entries and self._given.get(consumer.id) == entry
        if not continuing and consumer.available() <= 0:
            return False
        holder = self._slot_pending.get(delivery.slot)
        if holder is not None and holder[0] != consumer.id:
            return False  # draining: the slot's earlier messages are still unacked at another consumer
        if holder is None:
            self._slot_pending[delivery.slot] = [consumer.id, 1]
        else:
            holder[1] += 1
        self._sub.push(consumer, delivery, now)
        if consumer.whole_entries:
            self._given[consumer.id] = entry
        return True

    def _dispatch_redeliveries(self) -> None:
        if not self._redeliver:
            return
        keys = self._redeliver_keys
        delivered: set[MsgKey] = set()
        stuck_slots: set[int] = set()
        key_shared = self.type is SubscriptionType.KEY_SHARED
        self._given.clear()
        now = trio.current_time()
        # a consumer taking whole entries and the entry it was just given: the rest of that entry goes along
        entry_of: tuple[int, int] | None = None
        entry_to: Consumer | None = None
        for key in keys:
            delivery = self._redeliver[key]
            if entry_to is not None and (key[0], key[1]) == entry_of:
                self._sub.push(entry_to, delivery, now)
                delivered.add(key)
                continue
            if self._permits() <= 0 and not (key_shared and self._given):
                break
            if key_shared:
                if delivery.slot in stuck_slots or not self._try_key_shared(delivery, now):
                    stuck_slots.add(delivery.slot)
                    continue
            else:
                consumer = self.active if self.type is not None and self.type.single_active else None
                consumer = consumer or self._next_shared_consumer()
                if consumer is None or consumer.available() <= 0:
                    break
                self._sub.push(consumer, delivery, now)
                entry_of, entry_to = (key[0], key[1]), (consumer if consumer.whole_entries else None)
            delivered.add(key)
        if not delivered:
            return
        self._redeliver_keys = [key for key in keys if key not in delivered]
        for key in delivered:
            delivery = self._redeliver.pop(key)
            if key_shared:
                self._drop_redeliver_slot(delivery.slot)

    def _drop_redeliver_slot(self, slot: int) -> None:
        count = self._redeliver_slots.get(slot, 0) - 1
        if count > 0:
            self._redeliver_slots[slot] = count
        else:
            self._redeliver_slots.pop(slot, None)


def _take_rest_of_entry(ready: deque[Delivery], run: list[Delivery]) -> None:
    """Move the messages of ``run``'s last entry still in ``ready`` to ``run`` (a whole-entry consumer)."""
    last = run[-1]
    while ready and ready[0].entry_id == last.entry_id and ready[0].ledger_id == last.ledger_id:
        run.append(ready.popleft())
