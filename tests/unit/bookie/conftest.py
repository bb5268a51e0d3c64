"""Fixtures of the bookie storage-engine tests: small settings, packaged entries, durability recorders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.bookkeeper.protocol.digest import Digester, DigestType

DIGESTER = Digester(DigestType.CRC32C)


def packaged(ledger_id: int, entry_id: int, payload: bytes | None = None) -> bytes:
    """A real packaged entry (CRC32C digest) whose payload is derived from its ids unless given."""
    if payload is None:
        payload = f"payload of {ledger_id}:{entry_id}".encode() * 3
    return DIGESTER.package(ledger_id, entry_id, entry_id - 1, 0, payload)


def small_settings(tmp_path: Path, **overrides: Any) -> BookieStorageSettings:
    """Settings scaled down so that tests roll files and fill caches with little data."""
    values: dict[str, Any] = {
        "data_dir": tmp_path / "bookie",
        "journal_file_bytes_max": 256 * 1024,
        "journal_preallocate_bytes": 64 * 1024,
        "journal_queue_bytes_max": 1024 * 1024,
        "journal_buffered_bytes_max": 64 * 1024,
        "entry_log_bytes_max": 256 * 1024,
        "entry_bytes_max": 16 * 1024,
        "write_cache_bytes_max": 512 * 1024,
        "read_cache_bytes_max": 256 * 1024,
        "checkpoint_interval_ms": 3_600_000,
        "checkpoint_slice_entries": 64,
        "disk_free_bytes_min": 0,
    }
    values.update(overrides)
    return BookieStorageSettings(**values)


class Durability:
    """Records durability callbacks in the order they fire."""

    def __init__(self) -> None:
        self.results: list[tuple[str, BaseException | None]] = []
        self._changed = trio.Event()

    def callback(self, name: str) -> Callable[[BaseException | None], None]:
        def on_durable(error: BaseException | None) -> None:
            self.results.append((name, error))
            self._changed.set()
            self._changed = trio.Event()

        return on_durable

    async def wait_for(self, count: int) -> None:
        while len(self.results) < count:
            await self._changed.wait()

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.results]

    @property
    def errors(self) -> list[BaseException]:
        return [error for _, error in self.results if error is not None]


EntryMaker = Callable[..., bytes]
SettingsMaker = Callable[..., BookieStorageSettings]


@pytest.fixture
def durability() -> Durability:
    return Durability()


@pytest.fixture
def make_entry() -> EntryMaker:
    return packaged


@pytest.fixture
def make_settings(tmp_path: Path) -> SettingsMaker:
    def make(**overrides: Any) -> BookieStorageSettings:
        return small_settings(tmp_path, **overrides)

    return make
