"""The broker's retention service: trimming, message TTL and backlog quotas for every open managed ledger.

Theory of operation (docs/upstream.md, Pulsar §3.4, Pulsar's
``ManagedLedgerImpl.trimConsumedLedgersInBackground`` and ``BrokerService``'s periodic tasks):

* **Trimming.** ``ml.trim(policy)`` applies the trim rule (:mod:`magnetar.managed_ledger.trim`) with the
  topic's effective retention (topic > namespace > broker default, resolved by the :class:`PolicySource`).
  It runs for every open managed ledger every ``retention_check_interval_s``, and as soon as the factory's
  ``on_trim_candidate`` hook fires - after a rollover, when the slowest cursor enters a new ledger, when a
  cursor is deleted. The hook is synchronous and never blocks: it puts the ledger in a bounded queue that
  holds each topic at most once (a burst of events for one topic coalesces into one trim); when the queue is
  full the event is dropped and counted, and the periodic pass catches up. Trims run one at a time, in this
  service's task, so trimming never races itself (Pulsar's ``trimmerMutex``). The managed ledger removes the
  ledgers from its metadata first (CAS) and then deletes them on the bookies, retrying failed deletions on
  the next trim; bookie-side space reclamation is the bookie garbage collector's job.
* **Message TTL.** Every ``message_expiry_check_interval_s`` each durable cursor of a topic with a TTL is
  moved past the entries published more than TTL seconds ago (:mod:`.expiry`).
* **Backlog quotas.** Every ``backlog_quota_check_interval_s`` each topic's backlog is compared with its
  quotas (:mod:`.backlog_quota`); eviction moves the slow cursors, producer policies mark the topic for the
  broker's producers.
* **Inactive topics** are not deleted unless ``delete_inactive_topics_enabled`` (Pulsar deletes them by
  default - a documented surprise we do not copy); then ``delete_inactive_topic(ml)`` - the broker's
  decision, since only it knows about producers - is asked for each topic without subscriptions.

Failures are per topic: a policy that cannot be read or a trim that fails is logged and counted, and the
service goes on with the next topic.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime import Clock, SystemClock
from magnetar.gc.backlog_quota import BacklogQuotaMonitor
from magnetar.gc.expiry import PublishTimeOf, backlog_bytes, entries_to_evict, expire_cursor
from magnetar.gc.policies import BacklogPolicy, PolicySource, TopicRetentionPolicies
from magnetar.gc.settings import RetentionSettings
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.factory import ManagedLedgerFactory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.ledger_state import State

log = logging.getLogger(__name__)

_FAILURES = (ManagedLedgerError, BKError, MetadataStoreError, trio.TooSlowError)
InactiveTopicHook = Callable[[ManagedLedger], Awaitable[bool]]
CursorMovedHook = Callable[[ManagedLedger, str], None]
"""Told after TTL or backlog eviction moved a cursor (ledger, cursor name): the broker's dispatcher
re-reads from the cursor instead of delivering what is now acknowledged."""


@dataclass
class RetentionStats:
    trims: int = 0
    ledgers_deleted: int = 0
    trim_failures: int = 0
    trim_events_dropped: int = 0
    messages_expired: int = 0
    backlog_entries_evicted: int = 0
    quota_exceeded_checks: int = 0
    inactive_topics_deleted: int = 0


class RetentionService:
    def __init__(
        self,
        policies: PolicySource,
        settings: RetentionSettings | None = None,
        *,
        publish_time_of: PublishTimeOf | None = None,
        clock: Clock | None = None,
        delete_inactive_topic: InactiveTopicHook | None = None,
        on_cursor_moved: CursorMovedHook | None = None,
    ) -> None:
        self._policies = policies
        self.settings = settings or RetentionSettings()
        self._publish_time_of = publish_time_of
        self._clock = clock or SystemClock()
        self._delete_inactive_topic = delete_inactive_topic
        self.on_cursor_moved: CursorMovedHook = on_cursor_moved or (lambda ml, name: None)
        self._pending: dict[str, ManagedLedger] = {}
        self._wakeup = trio.Event()
        self._idle = trio.Event()
        self._idle.set()
        self._factory: ManagedLedgerFactory | None = None
        self.quota = BacklogQuotaMonitor()
        self.stats = RetentionStats()

    # -- the factory hook -------------------------------------------------------------------------------

    def on_trim_candidate(self, ml: ManagedLedger) -> None:
        """Pass to ``open_managed_ledger_factory(on_trim_candidate=...)``. Never blocks."""
        if ml.name in self._pending:
            return
        if len(self._pending) >= self.settings.trim_queue_max:
            self.stats.trim_events_dropped += 1
            return
        self._pending[ml.name] = ml
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._wakeup.set()

    async def wait_idle(self) -> None:
        """Return once every queued trim has run (for orderly shutdown and tests)."""
        await self._idle.wait()

    # -- running ----------------------------------------------------------------------------------------

    async def run(
        self, factory: ManagedLedgerFactory, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve ``factory``'s managed ledgers until cancelled."""
        self._factory = factory
        s = self.settings
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._trim_queue_worker)
            nursery.start_soon(self._every, s.retention_check_interval_s, self.trim_all)
            if self._publish_time_of is not None:
                nursery.start_soon(self._every, s.message_expiry_check_interval_s, self.expire_all)
            nursery.start_soon(self._every, s.backlog_quota_check_interval_s, self.check_backlog_quotas)
            if s.delete_inactive_topics_enabled and self._delete_inactive_topic is not None:
                nursery.start_soon(self._every, s.delete_inactive_topics_frequency_s, self.delete_inactive)
            task_status.started()

    async def _every(self, interval_s: float, action: Callable[[], Awaitable[object]]) -> None:
        while True:
            await trio.sleep(interval_s)
            await action()

    async def _trim_queue_worker(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            while self._pending:
                name = next(iter(self._pending))
                await self.trim(self._pending.pop(name))
            self._idle.set()

    def _open_ledgers(self) -> list[ManagedLedger]:
        if self._factory is None:
            return []
        return [ml for ml in self._factory.opened() if ml.state not in (State.CLOSED, State.FENCED)]

    async def _policies_of(self, ml: ManagedLedger) -> TopicRetentionPolicies | None:
        try:
            return await self._policies.policies_for(ml.name)
        except (MetadataStoreError, ValueError) as exc:
            log.warning("retention: no policies for %s (skipped this round): %s", ml.name, exc)
            return None

    # -- trimming ---------------------------------------------------------------------------------------

    async def trim(self, ml: ManagedLedger) -> list[int]:
        """Trim ``ml`` under its effective retention now; returns the deleted ledger ids."""
        policies = await self._policies_of(ml)
        if policies is None:
            return []
        try:
            deleted = await ml.trim(policies.retention)
        except _FAILURES as exc:
            self.stats.trim_failures += 1
            log.warning("retention: trimming %s failed: %s", ml.name, exc)
            return []
        self.stats.trims += 1
        self.stats.ledgers_deleted += len(deleted)
        return deleted

    async def trim_all(self) -> None:
        for ml in self._open_ledgers():
            await self.trim(ml)

    # -- message TTL ------------------------------------------------------------------------------------

    async def expire(self, ml: ManagedLedger, ttl_s: int) -> int:
        """Acknowledge, on every durable cursor, the messages published more than ``ttl_s`` ago."""
        if self._publish_time_of is None or ttl_s <= 0:
            return 0
        cutoff = self._clock.time_ms() - ttl_s * 1000
        expired = 0
        for cursor in list(ml.subscription_cursors().values()):
            try:
                moved = await expire_cursor(
                    ml, cursor, cutoff, self._publish_time_of, self.settings.expiry_search_reads_max
                )
            except _FAILURES as exc:
                log.warning("retention: expiring %s/%s failed: %s", ml.name, cursor.name, exc)
                continue
            if moved:
                expired += moved
                self.on_cursor_moved(ml, cursor.name)
        self.stats.messages_expired += expired
        return expired

    async def expire_all(self) -> None:
        for ml in self._open_ledgers():
            policies = await self._policies_of(ml)
            if policies is not None and policies.message_ttl_s > 0:
                await self.expire(ml, policies.message_ttl_s)

    # -- backlog quotas ---------------------------------------------------------------------------------

    async def check_backlog_quota(self, ml: ManagedLedger, policies: TopicRetentionPolicies) -> bool:
        """Apply ``ml``'s quotas once; True if one was exceeded."""
        exceeded = False
        size = policies.size_quota
        if size is not None and size.limit_bytes >= 0:
            slowest = ml.slowest_subscription_mark_delete()
            if slowest is not None and backlog_bytes(ml, slowest) > size.limit_bytes:
                exceeded = True
                self._apply_size_quota(ml, size.limit_bytes, size.policy)
        age = policies.age_quota
        if (
            age is not None
            and age.limit_time_s >= 0
            and await self._oldest_backlog_older_than(ml, age.limit_time_s)
        ):
            exceeded = True
            if age.policy is BacklogPolicy.CONSUMER_BACKLOG_EVICTION:
                await self.expire(ml, max(age.limit_time_s, 1))
            else:
                self.quota.mark_exceeded(ml.name, age.policy)
        if not exceeded:
            self.quota.mark_within(ml.name)
        else:
            self.stats.quota_exceeded_checks += 1
        return exceeded

    def _apply_size_quota(self, ml: ManagedLedger, limit_bytes: int, policy: BacklogPolicy) -> None:
        if policy is not BacklogPolicy.CONSUMER_BACKLOG_EVICTION:
            self.quota.mark_exceeded(ml.name, policy)
            return
        target = int(limit_bytes * self.settings.backlog_eviction_target_fraction)
        for cursor in list(ml.subscription_cursors().values()):
            count = entries_to_evict(ml, cursor, target)
            if count > 0:
                cursor.skip(count)
                self.on_cursor_moved(ml, cursor.name)
                self.stats.backlog_entries_evicted += count
                log.info("backlog quota: evicted %d entries of %s/%s", count, ml.name, cursor.name)

    async def _oldest_backlog_older_than(self, ml: ManagedLedger, limit_s: int) -> bool:
        slowest = ml.slowest_subscription_mark_delete()
        if slowest is None or self._publish_time_of is None:
            return False
        first = ml.ledgers.next_position(slowest)
        if first > ml.last_confirmed:
            return False
        entry = await ml.read_entry(first)
        if entry is None:
            return False
        try:
            published = self._publish_time_of(entry.data)
        except ValueError:
            return False
        return self._clock.time_ms() - published > limit_s * 1000

    async def check_backlog_quotas(self) -> None:
        ledgers = self._open_ledgers()
        for ml in ledgers:
            policies = await self._policies_of(ml)
            if policies is None:
                continue
            try:
                await self.check_backlog_quota(ml, policies)
            except _FAILURES as exc:
                log.warning("backlog quota check of %s failed: %s", ml.name, exc)
        self.quota.forget_except({ml.name for ml in ledgers})

    # -- inactive topics --------------------------------------------------------------------------------

    async def delete_inactive(self) -> None:
        hook = self._delete_inactive_topic
        if hook is None or not self.settings.delete_inactive_topics_enabled:
            return
        for ml in self._open_ledgers():
            if ml.subscription_cursors():
                continue
            try:
                if await hook(ml):
                    self.stats.inactive_topics_deleted += 1
            except _FAILURES as exc:
                log.warning("deleting inactive topic %s failed: %s", ml.name, exc)
