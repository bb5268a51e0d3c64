"""``/metrics`` storage figures read from live managed ledgers and the retention service."""

from __future__ import annotations

import trio
from fixtures.client import open_in_process_bookies
from prometheus_client.parser import text_string_to_metric_families

from magnetar.admin.processes.metrics import StorageMetrics
from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.metrics.exposition import render_text
from magnetar.gc.policies import FixedPolicies, TopicRetentionPolicies
from magnetar.gc.retention import RetentionService
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.settings import ManagedLedgerSettings
from magnetar.managed_ledger.trim import RetentionPolicy

SETTINGS = ManagedLedgerSettings(
    ensemble_size=1, write_quorum=1, ack_quorum=1, max_entries_per_ledger=100, min_ledger_rollover_time_min=0
)


TOPIC = {
    "cluster": "standalone",
    "namespace": "public/default",
    "topic": "persistent://public/default/metered",
}


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"no sample {name} {labels} in:\n{text}")


async def test_storage_metrics() -> None:
    metadata = MemoryMetadataStore()
    service = RetentionService(FixedPolicies(TopicRetentionPolicies(RetentionPolicy(-1, -1))))
    async with (
        open_in_process_bookies(metadata, 1) as bookies,
        open_bookkeeper(
            metadata, bookies.transport, ClientSettings(ensemble_size=1, write_quorum=1, ack_quorum=1)
        ) as bk,
        open_managed_ledger_factory(bk, metadata, SETTINGS, on_trim_candidate=service.on_trim_candidate) as f,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(service.run, f)
        source = StorageMetrics(f, service, "standalone")
        ml = await f.open("public/default/persistent/metered")
        cursor = await ml.open_cursor("sub", start_at_earliest=True)
        for i in range(250):
            await ml.add_entry(b"%04d" % i + b"x" * 96)
        await service.wait_idle()
        text = render_text([source])
        assert sample(text, "pulsar_storage_backlog_size", **TOPIC) == 250 * 100
        assert sample(text, "magnetar_ml_ledgers", **TOPIC) == 3
        assert sample(text, "magnetar_ml_entries_added_total", **TOPIC) == 250
        assert sample(text, "magnetar_ml_rollovers_total", **TOPIC) == 2
        assert sample(text, "pulsar_ml_count", cluster="standalone") == 1
        assert sample(text, "magnetar_ml_trims_total") >= 2
        assert sample(text, "magnetar_bookkeeper_client_adds_total") == 250
        assert sample(text, "magnetar_bookkeeper_client_add_latency_seconds_count") == 250
        assert sample(text, "magnetar_bookkeeper_client_ledgers_created_total") == 3
        assert sample(text, "magnetar_bookkeeper_client_add_failures_total") == 0
        cursor.ack_cumulative(ml.last_confirmed)
        text = render_text([source])
        assert sample(text, "pulsar_storage_backlog_size", **TOPIC) == 0
        nursery.cancel_scope.cancel()
    await metadata.aclose()
