"""What the broker does while its metadata store is away (the whole story: docs/metadata-outages.md).

The data path needs no metadata: producers append to the open ledgers, consumers get their deliveries and
acknowledge, cursors persist their positions to their cursor ledgers - all on the bookies. What needs the
store waits for it, bounded, and resumes when it is back:

* ledger rollovers are deferred by the managed ledger (the current ledger takes entries past its cap, up to
  ``rollover_deferred_entries_max``);
* loading a topic, creating a durable subscription and acquiring a bundle wait in :class:`MetadataWait` - at
  most ``metadata_wait_timeout_ms``, at most ``metadata_waiters_max`` requests at once - then fail with 503
  (the client retries; a lookup of a bundle this broker serves needs no store);
* policy reads answer the last known documents (:class:`~.policies.store.PolicyStore`);
* bundle ownership survives a lost session (:mod:`.ownership.state`, which holds the safety argument).

:class:`OutageReporter` logs one line when an outage begins - what is served, for how long at most, what is
deferred - and one when it ends, with what was deferred meanwhile. The figures are also metrics
(:class:`~.metrics.broker_metrics.MetadataFigures`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from magnetar.bookkeeper.metadata import HealthChange, MetadataHealth
from magnetar.broker.core import ServiceUnitNotReadyError
from magnetar.broker.metrics import MetadataFigures

log = logging.getLogger(__name__)


class MetadataWait:
    """Requests that need the metadata store wait for it during an outage, bounded in time and in number."""

    def __init__(self, health: MetadataHealth, *, timeout_ms: int, waiters_max: int) -> None:
        self._health = health
        self._timeout_ms = timeout_ms
        self._waiters_max = waiters_max
        self.waiting = 0

    async def ready(self, what: str) -> None:
        """Return once the store is healthy; raise :class:`ServiceUnitNotReadyError` (503) naming ``what``
        when it stays away ``metadata_wait_timeout_ms`` or ``metadata_waiters_max`` requests already wait."""
        if self._health.healthy:
            return
        if self.waiting >= self._waiters_max:
            raise ServiceUnitNotReadyError(
                f"{what}: the metadata store is unavailable and metadata_waiters_max={self._waiters_max} "
                "requests already wait for it"
            )
        self.waiting += 1
        try:
            healthy = await self._health.wait_healthy(self._timeout_ms / 1000)
        finally:
            self.waiting -= 1
        if not healthy:
            raise ServiceUnitNotReadyError(
                f"{what}: the metadata store is unavailable "
                f"(waited metadata_wait_timeout_ms={self._timeout_ms})"
            )


class OutageReporter:
    """Logs each outage once as it begins and once as it ends, with what the broker serves and defers."""

    def __init__(
        self,
        health: MetadataHealth,
        figures: Callable[[], MetadataFigures],
        *,
        metadata_wait_timeout_ms: int,
        topics: Callable[[], int],
    ) -> None:
        self._figures = figures
        self._wait_ms = metadata_wait_timeout_ms
        self._topics = topics
        self.unregister = health.add_listener(self._on_change)

    def _on_change(self, change: HealthChange) -> None:
        f = self._figures()
        if not change.healthy:
            log.warning(
                "metadata store unavailable (%s, outage #%d): serving %d topics in %d bundles on, for at "
                "most serve_without_session_max_s=%g s without a confirmed session; deferred until the store "
                "is back: ledger rollovers (up to rollover_deferred_entries_max=%d entries past the cap, "
                "then publishes fail), topic loads, new subscriptions and bundle acquisitions (each waits up "
                "to metadata_wait_timeout_ms=%d); policy reads answer the last known policies",
                change.state.value,
                change.generation,
                self._topics(),
                f.bundles_owned,
                f.serve_without_session_max_s,
                f.rollover_deferred_entries_max,
                self._wait_ms,
            )
            return
        log.warning(
            "metadata store back after %.1f s (outage #%d, session %s): %d bundles served, %d of them to be "
            "claimed again; %d topics have deferred rollovers (%d entries past the cap), rolling now",
            change.outage_s,
            change.generation,
            "lost" if change.session_lost else "kept",
            f.bundles_owned,
            f.bundles_unconfirmed,
            f.rollovers_deferred,
            f.entries_past_cap,
        )
