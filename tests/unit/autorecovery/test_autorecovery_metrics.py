"""AutoRecovery's metrics under BookKeeper's names: unscoped in a separate ``magnetar autorecovery`` process,
under ``replication_`` inside a bookie (BookKeeper's embedded AutoRecovery), Magnetar's own figures under
``magnetar_autorecovery_``; rendered by prometheus_client's real exposition."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from magnetar.bookkeeper.autorecovery.metrics import EMBEDDED_SCOPE, AutoRecoveryCollector, AutoRecoveryStats


def _samples(scope: str) -> dict[str, float]:
    stats = AutoRecoveryStats(auditor_elected=True, under_replicated_ledgers=3, ledgers_replicated=2)
    stats.copied(10.0, 700)
    stats.copied(10.5, 300)
    registry = CollectorRegistry()
    registry.register(AutoRecoveryCollector(stats, lambda: 11.0, scope))
    text = generate_latest(registry).decode()
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in pairs}


def test_a_separate_process_exports_bookkeepers_names_unscoped() -> None:
    samples = _samples("")
    assert samples["auditor_NUM_UNDER_REPLICATED_LEDGERS"] == 3
    assert samples["replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED"] == 2
    assert samples["replication_worker_NUM_ENTRIES_WRITTEN"] == 2
    assert samples["replication_worker_NUM_BYTES_WRITTEN"] == 1000
    assert samples["magnetar_autorecovery_auditor_elected"] == 1
    assert samples["magnetar_autorecovery_replication_rate_bytes_per_s"] == 100  # 1,000 bytes in 10 s
    assert samples["magnetar_autorecovery_replication_failures_total"] == 0
    assert not any(name.startswith("replication_replication") for name in samples)


def test_inside_a_bookie_they_are_scoped_as_bookkeepers_embedded_autorecovery() -> None:
    samples = _samples(EMBEDDED_SCOPE)
    assert samples["replication_auditor_NUM_UNDER_REPLICATED_LEDGERS"] == 3
    assert samples["replication_replication_worker_NUM_BYTES_WRITTEN"] == 1000
    assert "auditor_NUM_UNDER_REPLICATED_LEDGERS" not in samples
    assert samples["magnetar_autorecovery_auditor_elected"] == 1
