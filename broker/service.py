"""The broker service: which topics this broker serves, and loading them on demand (Pulsar's
``BrokerService`` + ``NamespaceService``).

Ownership. A topic belongs to the namespace bundle containing the CRC-32 of its name; the broker that holds
the bundle's ephemeral node serves it (:mod:`.ownership.manager`). The first request for a topic whose bundle
nobody owns makes this broker take it (Pulsar's lookup assigns an unowned bundle; without a load manager the
broker asked is the candidate). A request for a topic owned elsewhere raises :class:`NotOwnerError` carrying
the owner's URL: the WebSocket API serves the session through its owner proxy (or answers 307), lookup answers
the owner's URLs.

Loading. A topic's managed ledger is opened on first use, only once this broker owns the bundle; the open
sequence of the managed ledger recovers (fences) the last ledger, so a previous owner's writes stop and every
acknowledged entry stays. Auto-creation (the namespace's ``autoTopicCreation`` policy, else
``allow_auto_topic_creation``, on by default) creates a missing topic, but only in an existing namespace;
a partition of an existing partitioned topic is always created.
A name ``<topic>-partition-<i>`` whose ``<topic>`` is a partitioned topic with ``i`` or fewer partitions names
no topic at all: it is neither loaded nor created, and lookups of it fail - 404, as Pulsar's broker answers
"topic not found" for a partition beyond the count. (When ``<topic>`` is not partitioned the name is an
ordinary topic of its own, as in Pulsar.)

Losing ownership. A lost metadata session does not stop the broker: it serves its bundles on and claims them
again once the store is back (:mod:`.ownership.state`). When the ownership manager gives bundles up - another
broker took them meanwhile, or ``serve_without_session_max_s`` ran out - the service fences each topic of
those bundles synchronously (no more writes accepted, sessions closed) before anything else can run, then
closes their managed ledgers in the background. Unloading a bundle (admin) closes its topics cleanly and
releases the bundle so another broker can take it.

Metadata outages (:mod:`.metadata_outage`): loading a topic, creating a subscription and acquiring a bundle
wait for the store, bounded (``metadata_wait_timeout_ms``, ``metadata_waiters_max``); policy reads answer
the last known policies; everything else goes on.

Policies: each loaded topic gets what its policies bound (producers, consumers, subscriptions, the quorum
of its next ledger ...) when it loads and on every change (:mod:`.topic_policy_watch`); inactive topics and
expired subscriptions are deleted as they say (:mod:`.inactivity`).
"""

from __future__ import annotations

import itertools
import logging
import random

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.bookkeeper.metadata import BadVersionError, MetadataStore, MetadataStoreError
from magnetar.bookkeeper.runtime import Clock, SystemClock
from magnetar.broker.core import (
    NonPersistentTopic,
    NotOwnerError,
    PersistentTopic,
    ServiceUnitNotReadyError,
    SubscriptionBusyError,
    TopicMetrics,
    TopicNotFoundError,
)
from magnetar.broker.inactivity import InactivityMonitor
from magnetar.broker.metadata_outage import MetadataWait, OutageReporter
from magnetar.broker.metrics import BrokerMetrics, MetadataFigures
from magnetar.broker.namespace_topics import namespace_topics
from magnetar.broker.non_persistent_service import NonPersistentTopics
from magnetar.broker.ownership import (
    Bundle,
    BundleMap,
    BundleStats,
    Handlers,
    LoadManager,
    OwnerGoneError,
    OwnerInfo,
    OwnershipManager,
    Resolution,
    bundle_stats,
    tcp_probe,
)
from magnetar.broker.policies import PolicyError, PolicyStore, PublishGate
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.security import build_security
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.topic_policy_watch import TopicPolicyWatch
from magnetar.broker.wire import AdvertisedListener, NamespaceName, TopicName
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.factory import ManagedLedgerFactory

log = logging.getLogger(__name__)

LOST_TOPIC_CLOSE_TIMEOUT_S = 10.0
"""Bound on closing the managed ledger of a topic whose bundle was lost (the store may be unreachable)."""


class BrokerService:
    def __init__(
        self,
        settings: BrokerSettings,
        metadata: MetadataStore,
        ml_factory: ManagedLedgerFactory,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.metadata = metadata
        self.ml_factory = ml_factory
        self.policies = PolicyStore(metadata, last_known_max=settings.policies_last_known_max)
        self.clock = clock or SystemClock()
        self.security = build_security(settings, self.policies, self.clock)
        self.schemas = SchemaRegistry(metadata, settings.schema_limits(), self.clock.time_ms)
        """Topic schemas (:mod:`.schemas`), for the binary protocol and the admin API."""
        self.rng = rng or random.Random()
        self.topics: dict[str, PersistentTopic] = {}
        self.non_persistent = NonPersistentTopics(self.clock, settings.non_persistent_topics_max)
        """The loaded non-persistent topics (:mod:`.non_persistent_service`), kept apart from ``topics``."""
        self._topic_bundles: dict[str, Bundle] = {}
        self._loading: dict[str, trio.Event] = {}
        self.bundles = BundleMap(self.policies, settings.default_number_of_namespace_bundles)
        """Which bundle holds a topic (each namespace's boundaries)."""
        self.topic_policies = TopicPolicyWatch(
            metadata,
            self.policies,
            settings.policy_defaults(),
            lambda: [*self.topics.values(), *self.non_persistent.topics.values()],
            retention_default_min=settings.default_retention_time_min,
        )
        """Each loaded topic's limits from its policies, refreshed on every change
        (:mod:`.topic_policy_watch`)."""
        self.inactivity = InactivityMonitor(
            self.clock,
            lambda: list(self.topics.values()),
            self.topic_policies.retention_minutes,
            self.delete_topic,
            self.policies,
            lambda: list(self.non_persistent.topics.values()),
            lambda topic: self.non_persistent.delete(topic, force=False),
        )
        """Deletes inactive topics and expired subscriptions as their policies say (:mod:`.inactivity`)."""
        self.metrics = BrokerMetrics(
            settings.cluster,
            lambda: [*self.topics.values(), *self.non_persistent.topics.values()],
            self.metadata_figures,
            topic_level=settings.expose_topic_level_metrics_in_prometheus,
            chunk_bytes=settings.metrics_chunk_bytes,
            step_ms=settings.metrics_step_ms,
        )
        # -- metadata outages: requests that need the store wait for it, bounded in time and number --
        self.metadata_wait = MetadataWait(
            metadata.health,
            timeout_ms=settings.metadata_wait_timeout_ms,
            waiters_max=settings.metadata_waiters_max,
        )
        self._outage_reporter = OutageReporter(
            metadata.health,
            self.metadata_figures,
            metadata_wait_timeout_ms=settings.metadata_wait_timeout_ms,
            topics=lambda: len(self.topics),
        )
        # --
        self._ownership: OwnershipManager | None = None
        self.load_manager: LoadManager | None = None
        self._nursery: trio.Nursery | None = None
        self.http_url = ""
        self.ready = False
        self._producer_counter = 0
        self.publish_gate: PublishGate | None = None
        """Backlog-quota admission of publishes, set by the composition root (see
        :mod:`.policies.publish_gate`)."""

    @property
    def ownership(self) -> OwnershipManager:
        if self._ownership is None:
            raise ServiceUnitNotReadyError("the broker is not serving yet")
        return self._ownership

    @property
    def broker_id(self) -> str:
        return self.http_url.removeprefix("http://")

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(
        self,
        http_url: str,
        *,
        http_url_tls: str = "",
        native_url: str = "",
        native_url_tls: str = "",
        advertised_listeners: tuple[AdvertisedListener, ...] = (),
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register the broker under ``http_url`` (and ``http_url_tls`` when it serves TLS; ``native_url``:
        its ``pulsar://`` URL, ``native_url_tls`` its ``pulsar+ssl://`` one, ``advertised_listeners`` its
        named listeners, published with them) and serve until cancelled (call :meth:`shutdown` first for a
        clean stop)."""
        self.http_url = http_url
        me = OwnerInfo(
            httpUrl=http_url,
            httpUrlTls=http_url_tls,
            nativeUrl=native_url,
            nativeUrlTls=native_url_tls,
            advertisedListeners=advertised_listeners,
        )
        self._ownership = OwnershipManager(
            self.metadata,
            self.broker_id,
            me,
            self._on_bundles_lost,
            serve_without_session_max_s=self.settings.serve_without_session_max_s,
            claim_retry_interval_s=self.settings.ownership_claim_retry_interval_ms / 1000,
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.non_persistent.bind(nursery)
                await self._ownership.register_broker({"cluster": self.settings.cluster})
                await nursery.start(self.topic_policies.run)
                nursery.start_soon(self._ownership.run)
                nursery.start_soon(
                    self.inactivity.run,
                    self.settings.broker_delete_inactive_topics_frequency_s,
                    self.settings.subscription_expiry_check_interval_s,
                )
                nursery.start_soon(self._update_rates)
                nursery.start_soon(self._purge_inactive_producers)
                if self.settings.load_balancer_enabled:
                    self.load_manager = self._load_manager(self._ownership)
                    await self.load_manager.report_once(force=True)
                    nursery.start_soon(self.load_manager.run)
                self.ready = True
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.ready = False
            self._ownership.close()
            self._outage_reporter.unregister()

    async def _update_rates(self) -> None:
        """Every ``stats_update_interval_s``: each loaded topic's stats rates (see :mod:`.core.rates`)."""
        period_s = self.settings.stats_update_interval_s
        started = trio.current_time()
        while True:
            await trio.sleep(period_s)
            now = trio.current_time()
            for topic in list(self.topics.values()):
                topic.update_rates(now - started)
            for np_topic in list(self.non_persistent.topics.values()):
                np_topic.update_rates(now - started)
            started = now

    async def _purge_inactive_producers(self) -> None:
        """Every third of ``broker_deduplication_producer_inactivity_timeout_minutes``: each loaded topic
        forgets the deduplication state of producer names gone for that long (:mod:`.core.dedup`)."""
        timeout_ms = int(self.settings.broker_deduplication_producer_inactivity_timeout_minutes * 60_000)
        while True:
            await trio.sleep(max(0.001, timeout_ms / 3000))
            for topic in list(self.topics.values()):
                topic.purge_inactive_producers(timeout_ms)

    async def shutdown(self) -> None:
        """Graceful stop: unload every topic (cursors persisted), then give every bundle up."""
        self.ready = False
        self.non_persistent.drop_all("Broker shutting down")
        for name in list(self.topics):
            topic = self.topics.pop(name, None)
            if topic is not None:
                await self._close_topic(topic, "Broker shutting down")
        if self._ownership is not None:
            try:
                await self._ownership.release_all()
            except MetadataStoreError as exc:
                log.warning("releasing bundles failed: %s", exc)

    def _check_ready(self) -> None:
        if not self.ready:
            raise ServiceUnitNotReadyError("the broker is not serving")

    # -- metadata outages: what they cost, as figures -----------------------------------------------------

    def metadata_figures(self) -> MetadataFigures:
        health = self.metadata.health
        mls = [topic.ml for topic in self.topics.values()]
        ownership = self._ownership
        return MetadataFigures(
            healthy=health.healthy,
            outages_total=health.outages_total,
            sessions_lost_total=health.sessions_lost_total,
            outage_s=health.outage_s(),
            waiters=self.metadata_wait.waiting,
            bundles_owned=0 if ownership is None else len(ownership.state.bundles),
            bundles_unconfirmed=0 if ownership is None else len(ownership.state.unconfirmed),
            rollovers_deferred=sum(1 for ml in mls if ml.rollover_deferred),
            entries_past_cap=sum(ml.entries_past_cap for ml in mls),
            serve_without_session_max_s=self.settings.serve_without_session_max_s,
            rollover_deferred_entries_max=self.settings.managed_ledger.rollover_deferred_entries_max,
        )

    # -- ownership -----------------------------------------------------------------------------

    async def bundle_of(self, topic: TopicName) -> Bundle:
        return await self.bundles.bundle_of(topic)

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        """The broker serving ``topic``: this one if it owns the bundle or just took it, else the owner - or,
        for a bundle nobody owns, the broker that decides where it goes (see :meth:`lookup`)."""
        return (await self.lookup(topic)).owner

    async def lookup(self, topic: TopicName) -> Resolution:
        """Where ``topic`` is served: this broker (taking the bundle if it is unowned and the load manager
        places it here), its live owner, or the broker to redirect to (the leader, or the broker the leader
        chose). An owner whose broker process does not answer is never named: 503, retry."""
        self._check_ready()
        namespace, bundle = await self.bundle_of(topic)
        ownership = self.ownership
        if ownership.owns(namespace, bundle):
            return Resolution(ownership.me)
        await self.metadata_wait.ready(f"acquiring bundle {namespace}/{bundle}")
        try:
            owner = await ownership.get_owner(namespace, bundle)
            if owner is None and self.load_manager is not None:
                # the namespace may have been split since its bundles were read: read them again
                self.bundles.forget(namespace)
                namespace, bundle = await self.bundle_of(topic)
                owner = await ownership.get_owner(namespace, bundle)
            if owner is None and self.load_manager is not None:
                resolution = await self.load_manager.resolve(namespace, bundle)
                if resolution is not None:
                    return resolution
            elif owner is not None:
                await self._check_alive(owner, namespace, bundle)
                return Resolution(owner)
        except OwnerGoneError as exc:
            raise ServiceUnitNotReadyError(str(exc)) from exc
        except MetadataStoreError as exc:
            raise ServiceUnitNotReadyError(f"bundle {namespace}/{bundle}: {exc}") from exc
        for _ in range(3):
            try:
                owner = await ownership.acquire(namespace, bundle)
            except BadVersionError:
                continue  # the owner vanished between our create and read: try again
            except MetadataStoreError as exc:
                raise ServiceUnitNotReadyError(f"bundle {namespace}/{bundle}: {exc}") from exc
            if self.load_manager is not None:  # taken, by us or a faster broker: an assignment is done
                await self.load_manager.acquired(namespace, bundle)
            return Resolution(owner)
        raise ServiceUnitNotReadyError(f"bundle {namespace}/{bundle} ownership is changing")

    async def _check_alive(self, owner: OwnerInfo, namespace: str, bundle: str) -> None:
        if owner.httpUrl == self.http_url:
            return
        timeout_s = self.settings.lookup_owner_probe_timeout_ms / 1000
        if not await tcp_probe(owner.httpUrl, timeout_s):
            raise OwnerGoneError(
                f"bundle {namespace}/{bundle} is owned by {owner.httpUrl}, which does not answer; "
                "its ownership ends when its metadata session expires"
            )

    async def check_owner(self, topic: TopicName) -> Bundle:
        """Raise :class:`NotOwnerError` unless this broker serves ``topic``; returns its bundle."""
        owner = await self.owner_of(topic)
        if owner.httpUrl != self.http_url:
            raise NotOwnerError(f"{topic} is served by {owner.httpUrl}", owner.httpUrl, owner.httpUrlTls)
        return await self.bundle_of(topic)

    def _on_bundles_lost(self, bundles: set[Bundle]) -> None:
        self.non_persistent.drop_bundles(bundles, "Broker lost the ownership of the topic's bundle")
        for name, bundle in list(self._topic_bundles.items()):
            if bundle not in bundles:
                continue
            topic = self.topics.pop(name, None)
            del self._topic_bundles[name]
            if topic is not None:
                topic.fence_now("Broker lost the ownership of the topic's bundle")
                if self._nursery is not None:
                    self._nursery.start_soon(self._close_lost_topic, topic)

    async def _close_lost_topic(self, topic: PersistentTopic) -> None:
        with trio.move_on_after(LOST_TOPIC_CLOSE_TIMEOUT_S):
            await self._close_topic(topic, "ownership lost")

    def _on_topic_fenced(self, topic: PersistentTopic) -> None:
        """Another broker took the managed ledger over: stop serving the topic."""
        if self.topics.get(topic.full_name) is topic:
            del self.topics[topic.full_name]
            self._topic_bundles.pop(topic.full_name, None)
        topic.fence_now("Topic ownership moved to another broker")
        if self._nursery is not None:
            self._nursery.start_soon(self._close_lost_topic, topic)

    # -- topics ------------------------------------------------------------------------------------

    def topic_if_loaded(self, topic: TopicName) -> PersistentTopic | None:
        loaded = self.topics.get(str(topic))
        return loaded if loaded is not None and not loaded.closed else None

    async def partitions(self, topic: TopicName, *, create: bool = True) -> int:
        """Partitions of a partitioned topic (0: not partitioned; Magnetar has no partitioned non-persistent
        topics). A topic that does not exist is created partitioned here, as a client's partition lookup
        does in Pulsar, when ``create`` and the namespace's auto-creation rule says ``partitioned``."""
        if topic.is_partition or not topic.is_persistent:
            return 0
        namespace = str(topic.namespace_name)
        try:
            count = await self.policies.get_partitions(namespace, topic.local_name)
            if count or not create:
                return count
            return await self.topic_policies.auto_partitions(topic, self.ml_factory.exists)
        except (PolicyError, MetadataStoreError, ManagedLedgerError) as exc:
            raise ServiceUnitNotReadyError(f"reading partitions of {topic} failed: {exc}") from exc

    async def check_partition_exists(self, topic: TopicName) -> None:
        """Raise :class:`TopicNotFoundError` for a partition beyond its partitioned topic's count."""
        if not topic.is_partition:
            return
        base = topic.partitioned_topic
        partitions = await self.partitions(base, create=False)
        if partitions and topic.partition_index >= partitions:
            raise TopicNotFoundError(
                f"Topic {topic} does not exist: {base} has {partitions} partitions (0 to {partitions - 1})"
            )

    async def namespace_topics(
        self, namespace: NamespaceName, *, persistent: bool, non_persistent: bool
    ) -> list[str]:
        """Full names of the namespace's topics (:mod:`.namespace_topics`): pattern consumers poll them."""
        try:
            return await namespace_topics(
                self.metadata,
                self.policies,
                self.non_persistent,
                namespace,
                persistent=persistent,
                non_persistent=non_persistent,
            )
        except (PolicyError, MetadataStoreError) as exc:
            raise ServiceUnitNotReadyError(f"listing the topics of {namespace} failed: {exc}") from exc

    async def serve_topic(
        self, topic: TopicName, *, create: bool = True
    ) -> PersistentTopic | NonPersistentTopic:
        """The loaded topic of either domain, loaded (and, if allowed, created) on first use: what the
        protocol adapters serve."""
        if topic.is_persistent:
            return await self.get_topic(topic, create=create)
        self._check_ready()
        await self.bundles.namespace_policies(str(topic.namespace_name))
        namespace = str(topic.namespace_name)
        may_create = create and await self.topic_policies.may_create(namespace)
        limits = await self.topic_policies.limits(topic)
        served = await self.non_persistent.get(
            topic,
            self.check_owner,
            may_create=may_create,
            check_count=lambda loaded: self.security.check_topic_count(namespace, loaded),
        )
        served.apply_limits(limits)
        return served

    async def get_topic(self, topic: TopicName, *, create: bool = True) -> PersistentTopic:
        """The loaded topic, loading (and, if allowed, creating) it on first use."""
        self._check_ready()
        key = str(topic)
        while True:
            loaded = self.topic_if_loaded(topic)
            if loaded is not None:
                return loaded
            pending = self._loading.get(key)
            if pending is None:
                break
            await pending.wait()
        # Registered before the first await: a concurrent request for the same topic waits for this load
        # instead of loading a second PersistentTopic over the same managed ledger.
        done = self._loading[key] = trio.Event()
        try:
            await self.check_partition_exists(topic)
            bundle = await self.check_owner(topic)
            return await self._load(topic, bundle, create=create)
        finally:
            del self._loading[key]
            done.set()

    async def _load(self, topic: TopicName, bundle: Bundle, *, create: bool) -> PersistentTopic:
        await self.metadata_wait.ready(f"loading topic {topic}")
        wait_s = self.settings.metadata_wait_timeout_ms / 1000
        if bundle in self.ownership.state.unconfirmed and not await self.ownership.wait_confirmed(
            *bundle, wait_s
        ):
            raise ServiceUnitNotReadyError(
                f"the ownership of bundle {bundle[0]}/{bundle[1]} is not confirmed"
            )
        await self.bundles.namespace_policies(bundle[0])
        name = topic.managed_ledger_name
        changes = self.topic_policies.changes
        limits = await self.topic_policies.limits(topic)
        try:
            may_create = await self._may_create(topic, create)
            topics_max = self.security.limits.topics_per_namespace_max
            if (not may_create or topics_max) and not await self.ml_factory.exists(name):
                if not may_create:
                    raise TopicNotFoundError(f"Topic {topic} does not exist")
                await self.check_topic_count(topic)
            ml = await self.ml_factory.open(name, quorum=limits.quorum)
        except (ManagedLedgerError, BKError, MetadataStoreError, trio.TooSlowError) as exc:
            raise ServiceUnitNotReadyError(f"Failed to load topic {topic}: {exc}") from exc
        if not self.ownership.owns(*bundle):  # lost while opening
            await self.ml_factory.close_ledger(name)
            raise ServiceUnitNotReadyError(f"ownership of {topic} was lost while loading it")
        loaded = PersistentTopic(
            topic,
            ml,
            self.settings,
            self.clock,
            TopicMetrics(),
            on_fenced=self._on_topic_fenced,
            close_ml=lambda: self.ml_factory.close_ledger(name),
            metadata_ready=self.metadata_wait.ready,
        )
        assert self._nursery is not None
        await self._nursery.start(loaded.run)
        loaded.apply_limits(limits)
        try:
            await loaded.check_deduplication()  # recovered before any producer publishes
        except ServiceUnitNotReadyError:
            await loaded.close("deduplication state not recovered")
            await self.ml_factory.close_ledger(name)
            raise
        self.topics[str(topic)] = loaded
        if self.topic_policies.changes != changes:  # changed while loading: the watch may have missed it
            loaded.apply_limits(await self.topic_policies.limits(topic))
        self._topic_bundles[str(topic)] = bundle
        log.info("loaded topic %s", topic)
        return loaded

    async def check_topic_count(self, topic: TopicName) -> None:
        """Refuse creating ``topic`` in a namespace holding ``topics_per_namespace_max`` topics (partitions
        count one each, as in Pulsar)."""
        if not self.security.limits.topics_per_namespace_max:
            return
        prefix = f"{topic.tenant}/{topic.namespace}/{topic.domain}"
        try:
            existing = await self.ml_factory.meta.list_managed_ledgers(prefix)
        except MetadataStoreError as exc:
            raise ServiceUnitNotReadyError(
                f"counting the topics of {topic.namespace_name} failed: {exc}"
            ) from exc
        self.security.check_topic_count(str(topic.namespace_name), len(existing))

    async def _may_create(self, topic: TopicName, create: bool) -> bool:
        if not create:
            return False
        if topic.is_partition:
            partitions = await self.partitions(topic.partitioned_topic, create=False)
            if partitions > topic.partition_index:
                return True
        return await self.topic_policies.may_create(str(topic.namespace_name))

    async def _close_topic(self, topic: PersistentTopic, reason: str) -> None:
        """Close ``topic`` (already out of :attr:`topics`). Until its managed ledger is closed, a request
        for the same name waits, as for a load in progress: loading it meanwhile would get the closing
        managed ledger from the factory, and its producers every write refused for good."""
        key = topic.full_name
        self._topic_bundles.pop(key, None)
        if key in self._loading:  # a load of the name already runs: it found the topic gone and reopens it
            await topic.close(reason)
            return
        done = self._loading[key] = trio.Event()
        try:
            await topic.close(reason)
        finally:
            del self._loading[key]
            done.set()

    async def unload_topic(self, topic: TopicName) -> bool:
        """Close a loaded topic cleanly (admin ``unload``); the bundle stays owned. False if not loaded."""
        if not topic.is_persistent:
            return self.non_persistent.drop(str(topic), "Topic unloaded") is not None
        loaded = self.topics.pop(str(topic), None)
        if loaded is None:
            return False
        await self._close_topic(loaded, "Topic unloaded")
        return True

    async def unload_bundle(self, namespace: str, bundle: str) -> None:
        """Close the bundle's topics cleanly - all at once, so the bundle's clients wait for the slowest
        topic, not for the sum - and give the bundle up: the next lookup may place it anywhere."""
        self.non_persistent.drop_bundles({(namespace, bundle)}, "Bundle unloaded")
        closing = []
        for name, owned in list(self._topic_bundles.items()):
            topic = self.topics.pop(name, None) if owned == (namespace, bundle) else None
            if topic is not None:
                closing.append(topic)
        async with trio.open_nursery() as nursery:
            for topic in closing:
                nursery.start_soon(self._close_topic, topic, "Bundle unloaded")
        await self.ownership.release(namespace, bundle)

    async def split_bundle(self, namespace: str, bundle: str, unload: bool) -> tuple[str, str]:
        """Split an owned bundle in two equal halves (Pulsar's ``range_equally_divide``): the namespace's
        boundaries get the middle, the bundle's topics are closed cleanly (their clients look them up again)
        and the old bundle is given up. Without ``unload`` this broker takes both halves first, so they stay
        here; with it the halves go through placement. Returns the halves' names."""
        if not self.ownership.owns(namespace, bundle):
            raise NotOwnerError(f"bundle {namespace}/{bundle} is not owned by this broker", "", "")
        halves = await self.bundles.split(namespace, bundle)
        if not unload:
            for half in halves:
                await self.ownership.acquire(namespace, half)
        await self.unload_bundle(namespace, bundle)
        log.info("split bundle %s/%s into %s and %s", namespace, bundle, *halves)
        return halves

    async def bundle_count(self, namespace: str) -> int:
        return await self.bundles.bundle_count(namespace)

    async def bundle_names(self, namespace: str) -> list[str]:
        """The namespace's bundles as they are now (``0xLOW_0xHIGH``), read from its policies."""
        return await self.bundles.bundle_names(namespace)

    def bundle_stats(self) -> list[tuple[Bundle, BundleStats]]:
        """Each owned bundle's traffic (Pulsar's ``NamespaceBundleStats``), from its loaded topics of both
        kinds."""
        loaded = ((bundle, self.topics.get(name)) for name, bundle in self._topic_bundles.items())
        persistent = ((bundle, topic) for bundle, topic in loaded if topic is not None)
        return bundle_stats(itertools.chain(persistent, self.non_persistent.by_bundle()))

    def connections(self) -> int:
        return sum(stats.sessions for _, stats in self.bundle_stats())

    def _load_manager(self, ownership: OwnershipManager) -> LoadManager:
        handlers = Handlers(
            sample=self.bundle_stats,
            connections=self.connections,
            unload=self.unload_bundle,
            split=self._split_for_leader,
            bundle_count=self.bundle_count,
        )
        return LoadManager(
            self.metadata, ownership, self.settings, handlers, extra={"cluster": self.settings.cluster}
        )

    async def _split_for_leader(self, namespace: str, bundle: str, unload: bool) -> None:
        await self.split_bundle(namespace, bundle, unload)

    async def delete_topic(self, topic: TopicName, *, force: bool = False) -> None:
        """Delete a (non-partitioned) topic and its data. Refused with 412 while it has producers or
        consumers, unless ``force``."""
        loaded = await self.get_topic(topic, create=False)
        busy = loaded.producers or any(s.consumers for s in loaded.subscriptions.values())
        if busy and not force:
            raise SubscriptionBusyError("Topic has active producers/subscriptions")
        self.topics.pop(str(topic), None)
        self._topic_bundles.pop(str(topic), None)
        loaded.fence_now("Topic deleted")
        await self.ml_factory.delete(topic.managed_ledger_name)
        loaded.stop()

    def next_producer_name(self) -> str:
        """Pulsar's generated producer names: ``<cluster>-<broker>-<counter>``."""
        self._producer_counter += 1
        return f"{self.settings.cluster}-{self.broker_id}-{self._producer_counter}"

    async def live_broker_native_urls(self) -> dict[str, str]:
        return await self.ownership.live_native_urls()
