"""RocksDB backend: what survives a restart or a crash, and single ownership of the directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.metadata.rocksdb_store import RocksDbMetadataStore, StoreInUseError

SUBPROCESS_TIMEOUT_S = 60

# Writes, then dies by SIGKILL without closing the store: what a crashed standalone process leaves behind.
CRASHING_WRITER = """
import os, signal, sys, trio
from magnetar.bookkeeper.metadata.rocksdb_store import RocksDbMetadataStore

async def main() -> None:
    store = RocksDbMetadataStore.open(sys.argv[1])
    await store.put("/kept/a", b"durable", -1)
    await store.put("/owners/me", b"ephemeral", -1, ephemeral=True)
    await store.put("/q/item-", b"", None, sequential=True)
    await store.put("/q/item-", b"", None, sequential=True)
    os.kill(os.getpid(), signal.SIGKILL)

trio.run(main)
"""

OPENER = """
import sys
from magnetar.bookkeeper.metadata.rocksdb_store import RocksDbMetadataStore
try:
    RocksDbMetadataStore.open(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _run_python(script: str, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, str(directory)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )


async def test_restart_keeps_persistent_nodes_and_drops_ephemeral_ones(tmp_path: Path) -> None:
    store = RocksDbMetadataStore.open(tmp_path)
    try:
        await store.put("/ml/topic", b"ledgers", -1)
        written = await store.put("/ml/topic", b"ledgers-2", 0)
        await store.put("/ml/topic/cursor", b"c", -1)
        await store.put("/brokers/me", b"", -1, ephemeral=True)
    finally:
        await store.aclose()
    reopened = RocksDbMetadataStore.open(tmp_path)
    try:
        got = await reopened.get("/ml/topic")
        assert got is not None
        assert (got.value, got.stat) == (b"ledgers-2", written)
        assert await reopened.get_children("/ml/topic") == ["cursor"]
        assert await reopened.get_children("/brokers") == []
        assert not await reopened.exists("/brokers/me")
    finally:
        await reopened.aclose()


async def test_sequential_counters_continue_after_restart(tmp_path: Path) -> None:
    store = RocksDbMetadataStore.open(tmp_path)
    try:
        before = [(await store.put("/q/item-", b"", None, sequential=True)).path for _ in range(3)]
    finally:
        await store.aclose()
    store = RocksDbMetadataStore.open(tmp_path)
    try:
        await store.delete(before[-1])  # deleting a child does not rewind the parent's counter
        after = (await store.put("/q/item-", b"", None, sequential=True)).path
    finally:
        await store.aclose()
    assert before == [f"/q/item-{i:010d}" for i in range(3)]
    assert after == "/q/item-0000000003"


async def test_crashed_process_keeps_acknowledged_writes_and_loses_its_ephemerals(tmp_path: Path) -> None:
    crashed = _run_python(CRASHING_WRITER, tmp_path)
    assert crashed.returncode == -9, crashed.stderr
    store = RocksDbMetadataStore.open(tmp_path)
    try:
        got = await store.get("/kept/a")
        assert got is not None
        assert got.value == b"durable"
        assert not await store.exists("/owners/me")
        assert await store.get_children("/owners") == []
        assert await store.get_children("/q") == ["item-0000000000", "item-0000000001"]
        assert (await store.put("/q/item-", b"", None, sequential=True)).path == "/q/item-0000000002"
    finally:
        await store.aclose()


async def test_second_process_gets_a_clear_lock_error(tmp_path: Path) -> None:
    store = RocksDbMetadataStore.open(tmp_path)
    try:
        other = _run_python(OPENER, tmp_path)
        assert other.returncode == 0, other.stderr
        assert other.stdout.startswith("StoreInUseError"), other.stdout
        assert "held by another process" in other.stdout
        with pytest.raises(StoreInUseError, match="held by another process"):
            RocksDbMetadataStore.open(tmp_path)  # a second store in this process is refused too
    finally:
        await store.aclose()
    reopened = RocksDbMetadataStore.open(tmp_path)  # closing released the lock
    await reopened.aclose()


def test_unusable_directory_is_a_metadata_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(MetadataStoreError, match="cannot open"):
        RocksDbMetadataStore.open(blocker / "metadata")
