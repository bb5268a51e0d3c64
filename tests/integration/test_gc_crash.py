"""Crash tests of compaction: SIGKILL a bookie engine at random points of a transactional compaction.

For each seed the test prepares an engine whose entry logs interleave long-lived and deleted ledgers, then
runs :mod:`gc_crash_worker` on it: forced major compaction (rate-limited so that it takes a while) while a
writer keeps adding acknowledged entries. The seed picks where the worker dies: at a given step of the
compaction (the worker SIGKILLs itself there: between copying batches, after the target is synced, after the
manifest, after the target became visible, between index relocation batches, after the index sync, between
source deletions) or at a random moment chosen by the test. Then the engine is reopened in-process (recovery
finishes or rolls back the interrupted compaction) and the test checks that no live entry is lost or changed,
that no index entry points at a missing log, that nothing of the interrupted compaction is left behind, and
that the next garbage-collection pass reclaims the space. Rerun a seed with
``pytest tests/integration/test_gc_crash.py -k 'seed-N'``.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import trio
from fixtures.gc import entry_log_bytes, live_bytes

from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import split_location
from magnetar.bookkeeper.bookie.storage.errors import NoLedgerError
from magnetar.gc.collector import BookieGarbageCollector

WORKER = Path(__file__).with_name("gc_crash_worker.py")
STARTUP_TIMEOUT_S = 30
RUN_TIMEOUT_S = 60


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gc_crash_worker", WORKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()
STEPS = {"copy": 20, "synced": 1, "manifest": 1, "visible": 1, "relocated": 3, "index-synced": 2}
STEPS |= {"source-deleted": 6, "done": 2}
"""Compaction steps and how many times each surely comes in the first pass (several jobs)."""
SEEDS = list(range(1, 11))


def kill_point(seed: int) -> tuple[str, int, float]:
    """``(step, occurrence, 0)`` to die at a compaction step, or ``("-", 0, delay)`` for a timed SIGKILL.

    Seeds 1-8 die at each step in turn (the seed picks which occurrence), later seeds at a random moment.
    """
    rng = random.Random(seed)
    if seed <= len(STEPS):
        step = sorted(STEPS)[seed - 1]
        return step, rng.randint(1, STEPS[step]), 0.0
    return "-", 0, rng.uniform(0.05, 0.6)


class Output:
    def __init__(self) -> None:
        self.acked: set[int] = set()
        self.steps: list[str] = []
        self.ready = False
        self._partial = b""

    def feed(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            kind, *fields = line.decode().split()
            if kind == "READY":
                self.ready = True
            elif kind == "A":
                self.acked.add(int(fields[1]))
            elif kind == "S":
                self.steps.append(fields[0])


async def run_worker(data_dir: Path, step: str, at: int, delay: float, stderr_path: Path) -> Output:
    out = Output()
    command = [sys.executable, str(WORKER), str(data_dir), step, str(at)]
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=stderr)
        try:
            assert process.stdout is not None
            with trio.fail_after(STARTUP_TIMEOUT_S):
                while not out.ready:
                    data = await process.stdout.receive_some(65536)
                    assert data, f"the worker exited before it was ready; see {stderr_path}"
                    out.feed(data)
            limit = delay if step == "-" else RUN_TIMEOUT_S
            with trio.move_on_after(limit) as scope:
                while data := await process.stdout.receive_some(65536):
                    out.feed(data)
            assert step == "-" or not scope.cancelled_caught, f"step {step}#{at} never came: {out.steps[-5:]}"
            process.kill()
            while data := await process.stdout.receive_some(65536):
                out.feed(data)
        finally:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    return out


def check_store(store: DbLedgerStorage, acked: set[int]) -> None:
    for ledger_id in worker.LONG:
        for entry_id in range(worker.ENTRIES):
            assert store.read_entry(ledger_id, entry_id) == worker.expected_entry(ledger_id, entry_id)
    for entry_id in sorted(acked):
        assert store.read_entry(worker.WRITER_LEDGER, entry_id) == worker.expected_entry(
            worker.WRITER_LEDGER, entry_id
        )
    for ledger_id in worker.SHORT:
        with pytest.raises(NoLedgerError):
            store.read_entry(ledger_id, 0)
    directory = store.settings.entry_log_path
    for ledger_id in store.ledgers():
        for entry_id, loc in store.index.entries_of(ledger_id):
            log_id = split_location(loc)[0]
            assert (directory / log_file_name(log_id)).exists(), (
                f"{ledger_id}:{entry_id} points at a missing log"
            )
    leftovers = [p.name for p in directory.iterdir() if p.suffix in (".compaction", ".compacting", ".tmp")]
    assert not leftovers, leftovers


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One prepared engine directory, copied for each seed (prepared by the worker script in a process of
    its own: a second ``trio.run`` inside the test process disturbed later tests' event loops)."""
    data_dir = tmp_path_factory.mktemp("gc-crash") / "bookie"
    subprocess.run([sys.executable, str(WORKER), str(data_dir), "prepare", "0"], check=True, timeout=120)
    return data_dir


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
async def test_no_live_entry_is_lost_when_compaction_is_killed(
    tmp_path: Path, prepared: Path, seed: int
) -> None:
    step, at, delay = kill_point(seed)
    print(f"gc crash test seed {seed}: kill at {f'step {step}#{at}' if step != '-' else f'{delay:.2f} s'}")
    data_dir = tmp_path / "bookie"
    shutil.copytree(prepared, data_dir)
    settings = worker.worker_settings(data_dir)
    before = entry_log_bytes(settings)
    out = await run_worker(data_dir, step, at, delay, tmp_path / "worker.stderr")
    print(f"seed {seed}: {len(out.acked)} writes acknowledged, steps before the kill: {out.steps[-4:]}")
    async with open_ledger_store(settings) as store:
        check_store(store, out.acked)
        collector = BookieGarbageCollector(
            store, None, worker.gc_settings().model_copy(update={"compaction_rate_bytes_per_s": 0})
        )
        await store.checkpoint()
        result = await collector.run_once(force_major=True)
        assert result is not None
        check_store(store, out.acked)
        live = live_bytes(store)
        after = entry_log_bytes(settings)
        print(f"seed {seed}: entry logs {before} -> {after} bytes, {live} live")
        assert after <= 1.1 * live + settings.entry_log_bytes_max
    async with open_ledger_store(settings) as store:
        check_store(store, out.acked)
