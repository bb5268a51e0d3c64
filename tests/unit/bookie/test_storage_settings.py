"""Storage-engine settings: BookKeeper's defaults, and relations that cannot work are refused up front."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from magnetar.bookkeeper.bookie.storage.settings import KIB, MIB, BookieStorageSettings


def test_defaults_follow_bookkeeper() -> None:
    settings = BookieStorageSettings()
    assert settings.journal_group_wait_ms == 2  # journalMaxGroupWaitMSec
    assert settings.journal_buffered_bytes_max == 512 * KIB  # journalBufferedWritesThreshold
    assert settings.journal_max_backups == 0  # journalMaxBackups 5; 0 as Pulsar's chart
    assert settings.journal_preallocate_bytes == 16 * MIB  # journalPreAllocSizeMB
    assert settings.entry_log_bytes_max == 1024 * MIB  # logSizeLimit
    assert settings.read_ahead_entries == 100  # dbStorage_readAheadCacheBatchSize
    assert settings.checkpoint_interval_ms == 10_000  # flushInterval


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"journal_buffered_bytes_max": 2 * MIB, "journal_queue_bytes_max": MIB}, "journal_buffered"),
        ({"entry_log_bytes_max": 4096 * MIB}, "32-bit offsets"),
        ({"write_cache_bytes_max": 8 * MIB, "entry_bytes_max": 4 * MIB}, "write_cache_bytes_max"),
        ({"entry_bytes_max": 300 * MIB}, "entry_bytes_max"),
        ({"journal_group_wait_ms": -1}, "greater than or equal"),
        ({"no_such_setting": 1}, "Extra inputs"),
    ],
)
def test_impossible_settings_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BookieStorageSettings.model_validate(overrides)


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = BookieStorageSettings(data_dir=tmp_path)
    with pytest.raises(ValidationError):
        settings.journal_group_wait_ms = 5
    assert settings.mark_path == tmp_path / "lastMark"
    assert settings.index_path == tmp_path / "index"
