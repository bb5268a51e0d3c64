"""Attaching a garbage collector to a bookie (used by the composition roots ``magnetar bookie`` and
``magnetar standalone``): the collector runs in the bookie's process over its disk engine, reads the bookie's
disk thresholds, makes the bookie re-check its disk after freeing space (so a read-only bookie turns writable
as soon as usage falls below ``disk_usage_lwm_threshold``), and exports its metrics through the bookie's
registry.
"""

from __future__ import annotations

import logging

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.bookkeeper.bookie import Bookie
from magnetar.bookkeeper.bookie.storage import DbLedgerStorage, LedgerStore
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.gc import BookieGarbageCollector, DiskPressure, GcMetrics

log = logging.getLogger(__name__)


def attach_garbage_collector(
    bookie: Bookie, store: LedgerStore, metadata: MetadataStore | None
) -> BookieGarbageCollector | None:
    """A collector for ``bookie`` (not started: ``await nursery.start(gc.run)``), or None when the bookie
    has no disk engine or GC is disabled."""
    settings = bookie.settings
    if not isinstance(settings, BookieSettings):
        raise TypeError("a garbage collector needs the bookie's process settings (BookieSettings, with gc)")
    if not settings.gc.gc_enabled:
        log.info("garbage collection is disabled (gc.gc_enabled=false)")
        return None
    if not isinstance(store, DbLedgerStorage):
        log.info("no garbage collection: the %s storage engine reclaims nothing on disk", settings.storage)
        return None
    collector = BookieGarbageCollector(
        store,
        metadata,
        settings.gc,
        disk=DiskPressure(warn=settings.disk_usage_warn_threshold, full=settings.disk_usage_threshold),
        on_space_freed=bookie.monitor.check,
        name=bookie.endpoint.bookie_id if bookie.endpoint is not None else str(settings.data_dir),
    )
    bookie.metrics.registry.register(GcMetrics(collector))
    return collector
