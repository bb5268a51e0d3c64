"""gc/'s compactor against a real storage engine on a temp dir, through the Protocol seam only
(``magnetar.bookkeeper.bookie.storage.gc_seam.StoragePrimitives``): a pass compacts and reclaims, and a crash
during the copy or during the commit leaves what the engine's recovery finishes or rolls back when it reopens.

The engine is reached through :class:`Seam`, which forwards every call to the engine's primitives and
records it: the compactor sees nothing else of the engine. A crash is what the process would leave on disk:
the test stops the compaction by raising at one of its steps and puts back anything the rollback of a live
process would have cleaned up (a crash runs no rollback), then reopens the engine without a final
checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from fixtures.gc import engine_settings, entry, entry_log_bytes, gc_settings, write_entries

from magnetar.bookkeeper.bookie.storage.compaction_files import COMPACTING_SUFFIX, MANIFEST_SUFFIX
from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import split_location
from magnetar.bookkeeper.bookie.storage.errors import NoLedgerError
from magnetar.bookkeeper.bookie.storage.gc_primitives import StepHook
from magnetar.bookkeeper.bookie.storage.gc_seam import StoragePrimitives
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.gc.compactor import CompactionPass, Compactor
from magnetar.gc.log_usage import UsageTracker

LONG, SHORT = (1, 3), (2, 4)
ENTRIES = 300


class Crash(Exception):
    pass


class Seam:
    """The engine's primitives as the compactor sees them, each call recorded (``calls``)."""

    def __init__(self, inner: StoragePrimitives) -> None:
        self._inner = inner
        self.calls: list[str] = []
        self.claimed: list[int] = []
        self.targets: list[int] = []

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._inner, name)
        if not callable(member):
            return member
        if name == "claim":
            return self._claim
        if name == "allocate_compaction_log":
            return self._allocate
        calls = self.calls

        def forward(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return member(*args, **kwargs)

        return forward

    def _claim(self, log_id: int) -> None:
        self.calls.append("claim")
        self.claimed.append(log_id)
        self._inner.claim(log_id)

    async def _allocate(self) -> int:
        self.calls.append("allocate_compaction_log")
        target = await self._inner.allocate_compaction_log()
        self.targets.append(target)
        return target


async def major_pass(seam: Seam, settings: BookieStorageSettings, on_step: StepHook | None) -> CompactionPass:
    """One major compaction pass of gc/'s compactor, which reaches the engine only through ``seam``."""
    storage = cast(StoragePrimitives, seam)  # a forwarding proxy of the real engine's primitives
    tracker = UsageTracker(storage)
    compactor = Compactor(
        storage,
        tracker,
        gc_settings(compaction_relocate_batch_entries=16),
        target_log_bytes=settings.entry_log_bytes_max,
        free_bytes=lambda: None,
        on_step=on_step,
    )
    await tracker.refresh()
    return await compactor.run("major", 0.8, max_time_s=0, stop=lambda: None)


async def prepared(settings: BookieStorageSettings) -> None:
    """Ledgers 1-4 interleaved in every entry log; 2 and 4 deleted."""
    async with open_ledger_store(settings) as store:
        await write_entries(store, (*LONG, *SHORT), ENTRIES)
        for ledger_id in SHORT:
            store.delete_ledger(ledger_id)
        await store.journal.drain()


def assert_intact(store: DbLedgerStorage, settings: BookieStorageSettings) -> None:
    """Every live entry reads back byte for byte, no index entry points at a missing log, the deleted
    ledgers stay deleted, and nothing of an interrupted compaction is left."""
    for ledger_id in LONG:
        for entry_id in range(ENTRIES):
            assert store.read_entry(ledger_id, entry_id) == entry(ledger_id, entry_id)
        for _, loc in store.index.entries_of(ledger_id):
            log_id, _ = split_location(loc)
            assert (settings.entry_log_path / log_file_name(log_id)).exists()
    for ledger_id in SHORT:
        with pytest.raises(NoLedgerError):
            store.read_entry(ledger_id, 0)
    leftovers = [p.name for p in settings.entry_log_path.iterdir() if p.name.endswith(
        (COMPACTING_SUFFIX, MANIFEST_SUFFIX)
    )]  # fmt: skip
    assert leftovers == []


async def test_a_pass_through_the_seam_compacts_and_reclaims(tmp_path: Path) -> None:
    settings = engine_settings(tmp_path / "bookie")
    await prepared(settings)
    async with open_ledger_store(settings) as store:
        before = entry_log_bytes(settings)
        seam = Seam(store.gc)
        steps: list[str] = []
        result = await major_pass(seam, settings, steps.append)
        assert result.stopped is None
        assert result.jobs >= 1
        assert result.reclaimed_bytes > 0
        assert entry_log_bytes(settings) == before - result.reclaimed_bytes
        assert steps.index("manifest") < steps.index("visible") < steps.index("done")
        for primitive in (
            "log_ids",
            "usage",
            "allocate_compaction_log",
            "claim",
            "locate",
            "write_manifest",
        ):
            assert primitive in seam.calls, primitive
        assert seam.calls.count("finish_compaction") == result.jobs
        assert seam.calls.count("release") == result.jobs
        assert seam.claimed
        assert all(not (settings.entry_log_path / log_file_name(s)).exists() for s in seam.claimed)
        assert_intact(store, settings)


def crash_at(step: str, occurrence: int, before_crash: Callable[[], None] = lambda: None) -> StepHook:
    seen = 0

    def hook(name: str) -> None:
        nonlocal seen
        if name == step:
            seen += 1
            if seen == occurrence:
                before_crash()
                raise Crash(name)

    return hook


async def test_an_interrupted_copy_is_discarded_at_reopen(tmp_path: Path) -> None:
    settings = engine_settings(tmp_path / "bookie")
    await prepared(settings)
    partial: dict[Path, bytes] = {}

    def keep_the_partial_copy() -> None:  # a crash runs no rollback: the half-written target stays
        for path in settings.entry_log_path.glob(f"*{COMPACTING_SUFFIX}"):
            partial[path] = path.read_bytes()

    async with open_ledger_store(settings, final_checkpoint=False) as store:
        seam = Seam(store.gc)
        with pytest.raises(Crash):
            await major_pass(seam, settings, crash_at("copy", 2, keep_the_partial_copy))
        assert "write_manifest" not in seam.calls
        for path, data in partial.items():
            path.write_bytes(data)
        sources = list(seam.claimed)
    assert len(partial) == 1
    async with open_ledger_store(settings) as store:
        assert not any(path.exists() for path in partial)
        assert all((settings.entry_log_path / log_file_name(s)).exists() for s in sources)
        assert_intact(store, settings)
        seam = Seam(store.gc)
        again = await major_pass(seam, settings, None)
        assert again.stopped is None
        assert again.reclaimed_bytes > 0
        assert_intact(store, settings)


COMMIT_STEPS = [("synced", 1), ("manifest", 1), ("visible", 1), ("relocated", 1), ("index-synced", 1)]
COMMIT_STEPS += [("source-deleted", 1)]


@pytest.mark.parametrize(("step", "occurrence"), COMMIT_STEPS, ids=[s for s, _ in COMMIT_STEPS])
async def test_an_interrupted_commit_is_finished_or_rolled_back_at_reopen(
    tmp_path: Path, step: str, occurrence: int
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    await prepared(settings)
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        seam = Seam(store.gc)
        with pytest.raises(Crash):
            await major_pass(seam, settings, crash_at(step, occurrence))
        target, sources = seam.targets[-1], list(seam.claimed)
        assert sources
    committed = step != "synced"  # the manifest is the commit point
    async with open_ledger_store(settings) as store:
        directory = settings.entry_log_path
        assert (directory / log_file_name(target)).exists() == committed
        remaining = [s for s in sources if (directory / log_file_name(s)).exists()]
        assert remaining == ([] if committed else sources)
        assert_intact(store, settings)
        seam = Seam(store.gc)
        again = await major_pass(seam, settings, None)
        assert again.stopped is None
        assert_intact(store, settings)
