"""The simulation one layer above the managed ledger: the broker core's persistent topic and one durable
subscription, served by a succession of brokers over the simulated network of :mod:`sim.sim_network`.

It reuses the managed-ledger tier's world (:class:`sim.sim_managed_ledger.MlWorld`: bookies, metadata-store
sessions, bookie crashes, session losses and take-overs, all on ``trio.testing.MockClock`` and driven by the
seed); what changes is what each broker serves and how the clients speak to it:

* **Each owner** opens the managed ledger and wraps it in a
  :class:`~magnetar.broker.core.topic.PersistentTopic` (its publish queue, its subscriptions' dispatchers), as
  the broker service does; the subscription comes back from the cursor the managed ledger recovered (or is
  created, from the earliest message). A topic whose managed ledger is fenced by the next owner is stopped as
  the service stops it (``fence_now``, then closed). Some owners *unload* the topic cleanly
  (``PersistentTopic.close``: writes and cursor state flushed) before the next one takes it.
* **The producer** (a client) publishes messages ``0..N-1`` through a core
  :class:`~magnetar.broker.core.producer.Producer` on the owner's topic, several in flight (so the publish
  queue batches them into entries), re-sending what failed or was not answered within 5 s, and moving to the
  next owner when the topic changes hands. A message is *acknowledged* once its completion said ``stored``.
* **The consumer** (a client; two on some Shared subscriptions, which now and then leave - what they got
  and did not answer goes to the other - and come back) subscribes (Exclusive or Shared) with a core
  :class:`~magnetar.broker.core.consumer.Consumer` whose delivery sink is the client's inbox, under push-mode
  windows or pull-mode permits; it acknowledges individually (``ack_fields``) or "cumulatively" (an
  ``ack_range`` from its oldest pending message up to one it received: everything pending up to it, as the
  binary protocol's ranges do), negatively acknowledges some messages, holds some past the ack timeout (they
  come back with the session's :class:`~magnetar.broker.core.redelivery_timers.RedeliveryTimers`, and it
  negatively acknowledges such a second copy), and re-subscribes on the next owner.

At the end the network heals, the subscription drains, and a fresh broker reads the topic and recovers the
cursor. The checkers:

1. *No acknowledged message lost*: every message whose publish was answered ``stored`` is in the topic as the
   verifier reads it, and was delivered to the consumer; a new owner's last confirmed position is at least
   every position acknowledged before it began to open the topic.
2. *Mark-delete only moves forward*: on each owner's cursor after every acknowledgement, and across owners
   (an owner recovers at least the highest mark-delete persisted - by a periodic flush or by a clean close's
   final snapshot - before it began to open the topic; the verifier at least all of them). The documented
   rollback (an unreadable cursor ledger: the metadata snapshot is used) is the one allowed step back, as in
   the managed-ledger tier.
3. *An acknowledged message is not delivered again*, in two precise forms:
   a. *same owner*: once the subscription accepted an acknowledgement of message ``(ledger, entry, batch
      index)`` (``ack_fields`` returned True, or it was pending at the consumer inside an ``ack_range``), that
      owner's topic never delivers it again;
   b. *across owners*: once a cursor state was reported persisted, neither the owner that persisted it nor
      any owner that began opening the topic afterwards delivers a message of an entry at or below its
      mark-delete or inside its persisted acknowledged ranges (a rollback resets this, as in 2.).
4. *No crash*: anything but the faults' own errors ending a task is a finding.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import trio
import trio.testing
from sim.sim_managed_ledger import (
    FAILURES,
    SUBSCRIPTION,
    TOPIC,
    MlScenario,
    MlWorld,
    draw_ml_scenario,
    message,
    message_index,
    run_world,
)

from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.runtime.clock import TrioClock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl, MsgKey, deliver_each
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import ServiceError
from magnetar.broker.core.producer import Capacity, Producer
from magnetar.broker.core.publish import MESSAGES, PublishRequest
from magnetar.broker.core.redelivery_timers import RedeliveryTimers
from magnetar.broker.core.subscriber import Subscriber
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.core.topic import PersistentTopic
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.broker.wire.entry_format import decode_entry
from magnetar.broker.wire.message_id import MessageId
from magnetar.broker.wire.topic_name import parse_topic_name
from magnetar.managed_ledger.cursor_store import CursorSnapshot
from magnetar.managed_ledger.factory import ManagedLedgerFactory
from magnetar.managed_ledger.position import Position

TOPIC_NAME = parse_topic_name("persistent://" + TOPIC.replace("/persistent/", "/"))
LINGER_S = 1.0
"""The consumer stays subscribed this long after it answered everything (late redeliveries would show)."""
RESEND_AFTER_S = 5.0
"""The producer re-sends a message not answered within this time (its outcome unknown)."""


@dataclass
class TopicScenario(MlScenario):
    in_flight: int = 1
    """Messages the producer keeps in flight (more than one: the publish queue batches them)."""
    pull_mode: bool = False
    window: int = 4
    """Push mode: the consumer's window; pull mode: the permits it grants at a time."""
    shared: bool = False
    """Shared rather than Exclusive."""
    nack: float = 0.0
    """Probability that the consumer negatively acknowledges a message."""
    hold: float = 0.0
    """Probability that it holds a message unacknowledged for a while (past the ack timeout, sometimes)."""
    ack_timeout_ms: int = 0
    unload: float = 0.0
    """Probability that an owner about to lose the topic unloads it cleanly first."""
    consumers: int = 1
    """Consumer clients of a Shared subscription (one for Exclusive)."""
    hold_s: float = 0.0
    """How long the consumer holds messages before it acknowledges them (past the ack timeout, sometimes:
    they come back meanwhile, and the client then holds two copies of one message)."""
    nack_delay_ms: int = 100
    leave: float = 0.0
    """Shared: probability, each round, that a consumer leaves (what it holds goes to the others) and comes
    back."""


def draw_topic_scenario(seed: int) -> TopicScenario:
    base = draw_ml_scenario(seed)
    rng = random.Random(f"topic-scenario-{seed}")
    fields = {name: getattr(base, name) for name in MlScenario.__dataclass_fields__}
    return TopicScenario(
        **fields,
        in_flight=rng.choice([1, 3, 8]),
        pull_mode=rng.random() < 0.5,
        window=rng.choice([1, 4, 20]),
        shared=rng.random() < 0.5,
        nack=rng.choice([0.0, 0.05, 0.2]),
        hold=rng.choice([0.0, 0.1, 0.3]),
        ack_timeout_ms=rng.choice([0, 300, 1000]),
        unload=rng.choice([0.0, 0.3, 0.7]),
        consumers=rng.choice([1, 2]),
        leave=rng.choice([0.0, 0.01, 0.03]),
        hold_s=rng.choice([0.05, 0.2, 0.5]),
        nack_delay_ms=rng.choice([100, 1000]),
    )


@dataclass(frozen=True)
class TopicSettings:
    """What :class:`PersistentTopic` reads (``BrokerSettings`` has them; small values: more batching)."""

    publish_batch_messages_max: int = 4
    publish_batch_bytes_max: int = 64 * 1024
    publish_inflight_entries_max: int = 2
    publish_pipeline_batch_messages_min: int = 2
    dispatch_read_entries_max: int = 5
    dispatch_redelivery_messages_max: int = 100
    dispatch_delayed_messages_max: int = 100
    broker_deduplication_entries_interval: int = 1000
    broker_deduplication_max_number_of_producers: int = 100
    metadata_operation_timeout_ms: int = 3000


@dataclass(frozen=True)
class SimMessage:
    """A message as a client publishes it (:class:`~magnetar.broker.wire.entry_format.MessageFields`)."""

    payload: bytes
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    event_time_ms: int = 0


@dataclass
class Durable:
    """A cursor state some owner reported persisted: what binds the owners that open the topic later."""

    mark_delete: Position
    ranges: tuple[tuple[int, int, int], ...]

    def covers(self, ledger_id: int, entry_id: int) -> bool:
        if Position(ledger_id, entry_id) <= self.mark_delete:
            return True
        return any(lid == ledger_id and first <= entry_id <= last for lid, first, last in self.ranges)


@dataclass
class TopicBroker:
    name: str
    store: MemoryMetadataStore
    factory: ManagedLedgerFactory
    topic: PersistentTopic
    subscription: Subscription
    binding: list[Durable]
    """The persisted cursor states this owner must respect (checker 3b)."""
    acked: set[MsgKey] = field(default_factory=set)
    """Messages whose acknowledgement this owner's subscription accepted (checker 3a)."""


class Inbox:
    """The consumer session's delivery sink: what the topic delivers lands here; every delivery is checked
    (checker 3) as it is pushed."""

    def __init__(self, world: TopicWorld, owner: TopicBroker) -> None:
        self.world = world
        self.owner = owner
        self.bytes = 0
        self.bytes_max = 1 << 30
        self.received: list[Delivery] = []
        self.arrived = trio.Event()
        self._listeners: list[Callable[[], None]] = []

    def room(self) -> int:
        return 1000

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        self.world.on_delivery(self.owner, delivery)
        self.received.append(delivery)
        self.arrived.set()

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        return deliver_each(self, deliveries, partition, redelivery_counts)


class Completion:
    """The producer client's view of its publish requests' outcomes."""

    def __init__(self, world: TopicWorld) -> None:
        self.world = world

    def stored(
        self,
        request: PublishRequest,
        partition: int,
        ledger_id: int,
        entry_id: int,
        first_index: int,
        batch_size: int,
    ) -> None:
        index = request.tag
        assert isinstance(index, int)
        self.world.on_stored(index, (ledger_id, entry_id, first_index))

    def failed(self, request: PublishRequest, reason: str) -> None:
        index = request.tag
        assert isinstance(index, int)
        self.world.on_failed(index, reason)


@dataclass
class TopicWorld(MlWorld):
    durable: list[Durable] = field(default_factory=list)
    published: dict[int, MsgKey] = field(default_factory=dict)
    """Message -> where its first ``stored`` answer put it."""
    in_flight: dict[int, float] = field(default_factory=dict)
    """Messages sent and not answered -> when they were sent."""
    resend: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.answered = trio.Event()
        self.backoff_until = 0.0
        self.topic_settings = TopicSettings()

    @property
    def ts(self) -> TopicScenario:
        assert isinstance(self.scenario, TopicScenario)
        return self.scenario

    @property
    def topic_owner(self) -> TopicBroker:
        owner = self.owners[-1]
        assert isinstance(owner, TopicBroker)
        return owner

    # -- brokers -------------------------------------------------------------------------------------------

    async def take_over(
        self, name: str, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run broker ``name``: load the topic and its subscription (retrying through faults), become the
        owner, and live until the run ends."""
        async with self.broker_factory(name) as (store, factory), trio.open_nursery() as nursery:
            while True:
                binding = list(self.durable)
                stored = max(self.acknowledged.values(), default=None)
                self.rollbacks.clear()
                topic: PersistentTopic | None = None
                try:
                    ml = await factory.open(TOPIC)
                    topic = PersistentTopic(
                        TOPIC_NAME,
                        ml,
                        self.topic_settings,
                        TrioClock(0),
                        TopicMetrics(),
                        on_fenced=lambda lost, n=nursery: self._fenced(lost, n),  # type: ignore[misc]
                        close_ml=lambda f=factory: f.close_ledger(TOPIC),  # type: ignore[misc]
                    )
                    await nursery.start(topic.run)
                    subscription = await topic.get_or_create_subscription(
                        SUBSCRIPTION, durable=True, start_earliest=True
                    )
                    break
                except (*FAILURES, ServiceError) as exc:
                    self.log(f"{name} could not load the topic: {exc!r}")
                    if topic is not None:
                        topic.fence_now("load failed")
                        topic.stop()
                    with contextlib.suppress(*FAILURES):
                        await factory.close_ledger(TOPIC)
                    await trio.sleep(0.3)
            if stored is not None and ml.last_confirmed < stored:
                self.violation(
                    f"{name} opened the topic at {ml.last_confirmed}, below the acknowledged {stored}"
                )
            mark = subscription.cursor.mark_delete
            self.log(f"{name} owns the topic: ledger {ml.current_ledger_id}, mark-delete {mark}")
            floor = max((d.mark_delete for d in binding), default=None)
            if self._rolled_back(name):
                # The documented rollback: the cursor restarted from its metadata snapshot, so what was
                # acknowledged since (a higher mark-delete, or only ranges of individual acks) comes again.
                # What was recovered binds from here on.
                recovered = Durable(mark, subscription.cursor.acked_ranges)
                binding = [recovered]
                self.durable = [recovered]
                self.persisted_marks = [mark]
            elif floor is not None and mark < floor:
                self.violation(f"mark-delete moved back across owners: {floor} persisted, {name} has {mark}")
            owner = TopicBroker(name, store, factory, topic, subscription, binding)
            self._record_persists(owner)
            self.owners.append(owner)  # type: ignore[arg-type]
            event, self.owner_changed = self.owner_changed, trio.Event()
            event.set()
            task_status.started()
            await trio.sleep_forever()

    async def unloaded(self, brokers: trio.Nursery, spare: list[str]) -> bool:
        """A clean unload, now and then: the owner closes the topic (accepted writes finished, the cursor's
        final snapshot written) and the next broker loads it."""
        if self.rng.random() >= self.ts.unload:
            return False
        owner = self.topic_owner
        self.log(f"{owner.name} unloads the topic")
        with trio.move_on_after(5.0):
            await owner.topic.close("Topic unloaded")
        await brokers.start(self.take_over, spare.pop(0))
        return True

    def _fenced(self, topic: PersistentTopic, nursery: trio.Nursery) -> None:
        """What the broker service does when another broker took the managed ledger over."""
        topic.fence_now("Topic ownership moved to another broker")

        async def close() -> None:
            with trio.move_on_after(5.0):
                await topic.close("ownership lost")

        nursery.start_soon(close)

    def _record_persists(self, owner: TopicBroker) -> None:  # type: ignore[override]
        """Note every cursor state the owner's cursor store persisted (flushes and the clean close's final
        snapshot): what later owners must respect."""
        store = owner.subscription.cursor._store
        assert store is not None
        persist, close = store.persist, store.close

        def note(snapshot: CursorSnapshot, how: str) -> None:
            durable = Durable(snapshot.mark_delete, snapshot.acked_ranges)
            self.durable.append(durable)
            owner.binding.append(durable)
            self.persisted_marks.append(snapshot.mark_delete)
            self.log(f"{owner.name} {how} mark-delete {snapshot.mark_delete} {snapshot.acked_ranges}")

        async def persisted(snapshot: CursorSnapshot) -> None:
            await persist(snapshot)
            note(snapshot, "persisted")

        async def closed(snapshot: CursorSnapshot) -> None:
            await close(snapshot)
            note(snapshot, "closed with")

        store.persist = persisted  # type: ignore[method-assign]
        store.close = closed  # type: ignore[method-assign]

    # -- what the clients see ------------------------------------------------------------------------------

    def on_stored(self, index: int, key: MsgKey) -> None:
        self.log(f"producer: message {index} stored at {key}")
        if index not in self.published:
            self.published[index] = key
            self.acknowledged[index] = Position(key[0], key[1])
        self.in_flight.pop(index, None)
        self.resend.discard(index)
        self.answered.set()

    def on_failed(self, index: int, reason: str) -> None:
        self.log(f"producer: message {index} failed: {reason}")
        if index not in self.published and self.in_flight.pop(index, None) is not None:
            self.resend.add(index)
            self.backoff_until = trio.current_time() + self.rng.uniform(0.05, 0.3)  # as clients back off
        self.answered.set()

    def on_delivery(self, owner: TopicBroker, delivery: Delivery) -> None:
        key = delivery.key
        index = message_index(delivery.message.payload)
        self.delivered.add(index)
        if key in owner.acked:
            self.violation(f"{owner.name} delivered {key} (message {index}) again after accepting its ack")
        for durable in owner.binding:
            if durable.covers(key[0], key[1]):
                self.violation(
                    f"{owner.name} delivered {key} (message {index}) although a persisted cursor state "
                    f"(mark-delete {durable.mark_delete}, ranges {durable.ranges}) acknowledged it"
                )
                break

    # -- actors --------------------------------------------------------------------------------------------

    async def producer(self) -> None:
        s = self.ts
        pending = list(range(s.messages))
        producer: Producer | None = None
        on: PersistentTopic | None = None
        completion = Completion(self)
        while len(self.published) < s.messages:
            owner = self.topic_owner
            if producer is None or producer.closed or on is not owner.topic:
                if producer is not None and on is not None:  # the session moves: outcomes unknown
                    on.remove_producer(producer)
                    self.resend.update(self.in_flight)
                    self.in_flight.clear()
                topic = on = owner.topic
                try:
                    producer = topic.add_producer(
                        "producer",
                        lambda t=topic: Producer(  # type: ignore[misc]
                            t, "producer", Capacity(100), partition=-1, clock=TrioClock(0)
                        ),
                    )
                except ServiceError as exc:
                    self.log(f"producer: cannot produce on {owner.name}: {exc}")
                    producer = None
                    with trio.move_on_after(0.2):
                        await self.owner_changed.wait()
                    continue
            now = trio.current_time()
            if now < self.backoff_until:
                await trio.sleep(self.backoff_until - now)
                continue
            for index, sent in list(self.in_flight.items()):
                if now - sent > RESEND_AFTER_S:
                    self.log(f"producer: message {index}: no answer, re-sending")
                    del self.in_flight[index]
                    self.resend.add(index)
            pending = [i for i in pending if i not in self.published]
            to_send = sorted(self.resend) + [
                i for i in pending if i not in self.resend and i not in self.in_flight
            ]
            sent_any = False
            for index in to_send:
                if len(self.in_flight) >= s.in_flight or producer.closed:
                    break
                if index in self.in_flight:
                    continue
                self.resend.discard(index)
                self.in_flight[index] = now
                data = message(s.seed, index)
                producer.publish(MESSAGES, SimMessage(data), 1, len(data), completion, index, now)
                sent_any = True
            if not sent_any or len(self.in_flight) >= s.in_flight:
                self.answered = trio.Event()
                with trio.move_on_after(0.1):
                    await self.answered.wait()
            elif self.rng.random() < 0.3:
                await trio.sleep(self.rng.uniform(0.0, 0.05))
        self.producer_done.set()

    async def consumer(self) -> None:
        """The subscription's consumer clients (two on some Shared subscriptions), until all are done."""
        s = self.ts
        count = s.consumers if s.shared else 1
        async with trio.open_nursery() as nursery:
            for number in range(count):
                nursery.start_soon(self._client, "consumer" if number == 0 else f"consumer{number + 1}")
        self.consumer_done.set()

    async def _client(self, name: str) -> None:
        while True:
            owner = self.topic_owner
            try:
                done = await self._consume_on(owner, name)
            except ServiceError as exc:
                self.log(f"{name}: cannot subscribe on {owner.name}: {exc}")
                done = False
            if done:
                return
            with trio.move_on_after(0.2):
                await self.owner_changed.wait()

    async def _consume_on(self, owner: TopicBroker, name: str) -> bool:
        """One consumer session on ``owner``'s topic, until it ends, the topic changes hands or the client
        leaves; True when everything acknowledged was received, the producer is done and the client
        answered all it got."""
        s = self.ts
        inbox = Inbox(self, owner)
        flow = FlowControl(s.window, pull_mode=s.pull_mode)
        ended = trio.Event()
        consumer_box: list[Consumer] = []

        def make() -> Consumer:
            consumer = Consumer(
                name=name,
                priority_level=0,
                partition=-1,
                flow=flow,
                sink=inbox,
                ack_timeout_ms=s.ack_timeout_ms,
                nack_delay_ms=s.nack_delay_ms,
            )
            consumer.disconnect = lambda reason: ended.set()
            consumer_box.append(consumer)
            return consumer

        sub_type = SubscriptionType.SHARED if s.shared else SubscriptionType.EXCLUSIVE
        subscriber = await owner.topic.subscribe(
            SUBSCRIPTION, make, sub_type, durable=True, start_earliest=True
        )
        consumer = consumer_box[0]
        self.log(f"{name}: subscribed on {owner.name}")
        held: list[Delivery] = []
        held_since = 0.0
        drained = False
        linger: float | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(RedeliveryTimers([subscriber], 50).run)
                while not ended.is_set() and self.topic_owner is owner:
                    if s.pull_mode and flow.available() <= 0 and not inbox.received:
                        flow.grant(s.window)
                    if not inbox.received:
                        if self._answered_all(consumer, held):
                            # linger a second: a redelivery of something acknowledged would show now
                            linger = linger if linger is not None else trio.current_time() + LINGER_S
                            if trio.current_time() >= linger:
                                drained = True
                                break
                        else:
                            linger = None
                        inbox.arrived = trio.Event()
                        with trio.move_on_after(0.1):
                            await inbox.arrived.wait()
                    if s.shared and self.rng.random() < s.leave:  # what it got and did not answer goes back
                        self.log(f"{name}: leaves {owner.name}, holding {len(consumer.pending)} messages")
                        break
                    deliveries, inbox.received = inbox.received, []
                    if deliveries and not held:
                        held_since = trio.current_time()
                    for delivery in deliveries:
                        self._answer(owner, subscriber, consumer, delivery, held)
                    if held and trio.current_time() - held_since >= s.hold_s:
                        self._ack_held(owner, subscriber, consumer, held)
                    await trio.sleep(self.rng.uniform(0.0, 0.03))
                nursery.cancel_scope.cancel()  # (the redelivery timers)
        finally:
            if not ended.is_set():
                subscriber.close()
        return drained

    def _answered_all(self, consumer: Consumer, held: list[Delivery]) -> bool:
        """Everything acknowledged was received and the client answered all it got (nothing held, pending
        at the broker or waiting for its negative-ack redelivery)."""
        if not self.producer_done.is_set() or not self.delivered >= set(self.published):
            return False
        return not held and not consumer.pending and not consumer.nacked

    def _answer(
        self,
        owner: TopicBroker,
        subscriber: Subscriber,
        consumer: Consumer,
        delivery: Delivery,
        held: list[Delivery],
    ) -> None:
        s = self.ts
        key = delivery.key
        roll = self.rng.random()
        if any(d.key == key for d in held):  # a second copy (the ack timeout): answered apart from the first
            roll = min(roll, s.nack)
        if roll < s.nack:
            self.log(f"{consumer.name}: nack {key} on {owner.name}")
            subscriber.nack(MessageId(key[0], key[1], -1, key[2], delivery.batch_size))
        elif roll < s.nack + s.hold:
            held.append(delivery)
        else:
            self._ack_one(owner, subscriber, key)

    def _ack_one(self, owner: TopicBroker, subscriber: Subscriber, key: MsgKey) -> None:
        before = owner.subscription.cursor.mark_delete
        if subscriber.ack_fields(-1, key[0], key[1], key[2]):
            owner.acked.add(key)
            self.log(f"{subscriber.consumer.name}: acked {key} on {owner.name}")
        self._check_mark(owner, before)

    def _ack_held(
        self, owner: TopicBroker, subscriber: Subscriber, consumer: Consumer, held: list[Delivery]
    ) -> None:
        """Acknowledge what was held: one by one, or as one range from the oldest pending message."""
        if self.rng.random() < self.scenario.cumulative and consumer.pending:
            last = max(d.key for d in held)
            first = min(consumer.pending)
            keys = [k for k in consumer.pending if first <= k <= last]
            before = owner.subscription.cursor.mark_delete
            acked = subscriber.ack_range(first, last)
            if acked:
                owner.acked.update(keys)
            self.log(f"{consumer.name}: acked the range {first}..{last} ({acked}) on {owner.name}")
            self._check_mark(owner, before)
        else:
            for delivery in held:
                self._ack_one(owner, subscriber, delivery.key)
        held.clear()

    def _check_mark(self, owner: TopicBroker, before: Position) -> None:
        after = owner.subscription.cursor.mark_delete
        if after < before:
            self.violation(f"mark-delete of {owner.name} moved back from {before} to {after}")

    def messages_in(self, data: bytes) -> list[int]:
        return [message_index(m.payload) for m in decode_entry(data).messages]


@dataclass
class TopicResult:
    seed: int
    scenario: TopicScenario
    violations: list[str]
    trace: list[str]
    acknowledged: int = 0
    owners: int = 0
    delivered: int = 0


def run_topic_seed(
    seed: int, inject: Callable[[], AbstractContextManager[object]] | None = None
) -> TopicResult:
    world = TopicWorld(draw_topic_scenario(seed))
    run_world(world, inject)
    return TopicResult(
        seed,
        world.scenario,
        world.violations,
        world.trace,
        len(world.published),
        len(world.owners),
        len(world.delivered),
    )
