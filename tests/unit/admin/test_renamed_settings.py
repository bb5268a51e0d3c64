"""One name, one meaning: the disk engine's free-space probe is ``storage_engine.disk_free_check_interval_ms``
(it was ``disk_check_interval_ms``, the name of the bookie's usage check too); the old name still sets it from
a config file, the environment and a keyword, and ``magnetar config show`` names where it came from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.config import Source, load_settings, render_toml
from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings

NEW = "storage_engine.disk_free_check_interval_ms"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MAGNETAR_"):
            monkeypatch.delenv(name)


def test_the_two_checks_have_two_names_and_keep_their_defaults() -> None:
    settings = BookieSettings()
    assert settings.disk_check_interval_ms == 10_000  # the usage thresholds (diskCheckInterval)
    assert settings.storage_engine.disk_free_check_interval_ms == 1_000  # the free-space floor
    assert "disk_check_interval_ms" not in BookieStorageSettings.model_fields


def test_the_old_name_sets_the_new_one_in_a_file(tmp_path: Path) -> None:
    config = tmp_path / "bookie.toml"
    config.write_text("disk_check_interval_ms = 5000\n[storage_engine]\ndisk_check_interval_ms = 200\n")
    loaded = load_settings(BookieSettings, {}, config)
    assert loaded.settings.disk_check_interval_ms == 5000
    assert loaded.settings.storage_engine.disk_free_check_interval_ms == 200
    assert loaded.source_of(NEW) is Source.FILE


def test_the_old_name_sets_the_new_one_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGNETAR_STORAGE_ENGINE__DISK_CHECK_INTERVAL_MS", "250")
    loaded = load_settings(BookieSettings, {})
    assert loaded.settings.storage_engine.disk_free_check_interval_ms == 250
    assert loaded.source_of(NEW) is Source.ENV
    shown = render_toml(loaded)
    assert "disk_free_check_interval_ms = 250  # env MAGNETAR_STORAGE_ENGINE__DISK_CHECK_INTERVAL_MS" in shown


def test_the_new_name_wins_over_the_old_one() -> None:
    both = BookieStorageSettings.model_validate(
        {"disk_check_interval_ms": 7, "disk_free_check_interval_ms": 9}
    )
    assert both.disk_free_check_interval_ms == 9
    assert BookieStorageSettings(disk_check_interval_ms=7).disk_free_check_interval_ms == 7  # type: ignore[call-arg]


def test_the_standalone_takes_the_old_name_in_its_bookie_table(tmp_path: Path) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text("[bookie.storage_engine]\ndisk_check_interval_ms = 300\n")
    loaded = load_settings(StandaloneSettings, {}, config)
    assert loaded.settings.bookie.storage_engine.disk_free_check_interval_ms == 300
    assert loaded.source_of(f"bookie.{NEW}") is Source.FILE
