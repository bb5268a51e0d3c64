"""Replication against real bookie processes.

A real ZooKeeper (fixture), real ``magnetar bookie`` processes (disk storage) on port 0, the replication
client over TCP: a writer survives a bookie SIGKILLed mid-stream (ensemble change), a SIGKILLed writer's
ledger is recovered by another client with every acknowledged entry, a writer fenced by that recovery cannot
add again, and a SIGKILLed bookie restarted on its data replays its journal and serves its entries again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path

import pytest
import trio
from fixtures.bookie_server import call
from fixtures.processes import MagnetarProcess, ProcessGroup

from magnetar.bookkeeper.client import BookKeeper, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store
from magnetar.bookkeeper.protocol.messages import ReadRequest, ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper, pytest.mark.slow]

WRITER = Path(__file__).with_name("ledger_writer.py")
SETTINGS = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
STORAGE = ("--storage", "disk")


# A killed bookie's registration lingers for its session timeout; keep it short so a restart is quick.
BOOKIE_ENV = {"MAGNETAR_METADATA_SESSION_TIMEOUT_MS": "4000"}


def start_bookies(group: ProcessGroup, url: str, tmp_path: Path, count: int) -> list[MagnetarProcess]:
    return [
        group.bookie(f"bookie{i}", url, tmp_path / f"bookie{i}", *STORAGE, env=BOOKIE_ENV)
        for i in range(count)
    ]


@asynccontextmanager
async def client(url: str) -> AsyncIterator[BookKeeper]:
    async with (
        open_metadata_store(url) as metadata,
        open_tcp_transport() as transport,
        open_bookkeeper(metadata, transport, SETTINGS) as bk,
    ):
        yield bk


async def test_writer_carries_on_when_a_bookie_is_killed_mid_stream(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    bookies = {b.ready["bookieId"]: b for b in start_bookies(magnetar_processes, zookeeper_url, tmp_path, 4)}
    total = 10_000
    async with client(zookeeper_url) as bk:
        handle = await bk.create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2, password=b"pw")
        victim = bookies[handle.metadata.last_ensemble[1][0]]
        results: list[int | Exception] = []
        done = trio.Event()

        def on_add(result: int | Exception) -> None:
            results.append(result)
            if len(results) == total:
                done.set()

        for i in range(total):
            if i == 3_000:
                victim.kill()
            await handle.wait_for_room()
            handle.add_entry_nowait(f"entry-{i}".encode(), on_add)
        with trio.fail_after(60):
            await done.wait()
        assert results == list(range(total)), [r for r in results if isinstance(r, Exception)][:3]
        # The writer replaced the dead bookie (possibly already at entry 0, replacing the first segment).
        assert victim.ready["bookieId"] not in handle.metadata.last_ensemble[1]
        await handle.close()
        reader = await bk.open_ledger(handle.ledger_id, password=b"pw", recovery=False)
        entries = await reader.read_entries(0, total - 1)
        assert [e.payload for e in entries] == [f"entry-{i}".encode() for i in range(total)]


@asynccontextmanager
async def writer_process(url: str, count: int, *extra: str) -> AsyncIterator[trio.Process]:
    command = [sys.executable, str(WRITER), url, str(count), *extra]
    process = await trio.lowlevel.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                await stream.aclose()


async def read_lines(process: trio.Process) -> AsyncIterator[dict[str, object]]:
    assert process.stdout is not None
    buffered = b""
    while True:
        while b"\n" not in buffered:
            chunk = await process.stdout.receive_some(65536)
            if not chunk:
                return
            buffered += chunk
        line, buffered = buffered.split(b"\n", 1)
        yield json.loads(line)


async def test_killed_writer_ledger_is_recovered_with_every_acknowledged_entry(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    start_bookies(magnetar_processes, zookeeper_url, tmp_path, 3)
    acked: set[int] = set()
    ledger_id = -1
    async with writer_process(zookeeper_url, 10_000) as writer, aclosing(read_lines(writer)) as lines:
        with trio.fail_after(60):
            async for line in lines:
                if "ledgerId" in line:
                    ledger_id = int(line["ledgerId"])  # type: ignore[call-overload]
                acked.update(line.get("acked", []))  # type: ignore[arg-type]
                if len(acked) >= 3_000:
                    writer.kill()
                    break
    assert ledger_id >= 0
    async with client(zookeeper_url) as bk:
        with trio.fail_after(30):  # a bound for a hang: this process shares the CPU with another test's
            recovered = await bk.open_ledger(ledger_id, password=b"pw", recovery=True)
        assert recovered.metadata.is_closed
        last = recovered.last_add_confirmed
        assert last >= max(acked), "recovery must keep every acknowledged entry"
        entries = await recovered.read_entries(0, last)
        assert [e.entry_id for e in entries] == list(range(last + 1))
        assert all(e.payload == f"entry-{e.entry_id}".encode() for e in entries)


async def test_writer_fenced_by_recovery_never_gets_another_add_acknowledged(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    start_bookies(magnetar_processes, zookeeper_url, tmp_path, 3)
    acked_before: set[int] = set()
    async with (
        writer_process(zookeeper_url, 3_000, "--pause-after", "1000") as writer,
        aclosing(read_lines(writer)) as lines,
    ):
        ledger_id = -1
        with trio.fail_after(60):
            async for line in lines:
                if "ledgerId" in line:
                    ledger_id = int(line["ledgerId"])  # type: ignore[call-overload]
                acked_before.update(line.get("acked", []))  # type: ignore[arg-type]
                if line.get("paused"):
                    break
        async with client(zookeeper_url) as bk:
            recovered = await bk.open_ledger(ledger_id, password=b"pw", recovery=True)
            assert recovered.last_add_confirmed == 999
            assert writer.stdin is not None
            await writer.stdin.send_all(b"go\n")
            acked_after: set[int] = set()
            failures = 0
            with trio.fail_after(60):
                async for line in lines:
                    acked_after.update(line.get("acked", []))  # type: ignore[arg-type]
                    failures += "failed" in line
                    if line.get("done"):
                        break
            assert acked_after == set(), "a fenced writer must never see an add acknowledged"
            assert failures == 2_000
            after = await bk.open_ledger(ledger_id, password=b"pw", recovery=False)
            assert after.last_add_confirmed == 999, "the closed ledger's end never changes"
    assert acked_before == set(range(1000))


async def test_killed_bookie_replays_its_journal_and_serves_its_entries_again(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    bookies = start_bookies(magnetar_processes, zookeeper_url, tmp_path, 3)
    victim = bookies[0]
    port = victim.ready["port"]
    total = 2_000
    async with client(zookeeper_url) as bk:
        handle = await bk.create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=3, password=b"pw")
        for i in range(total):
            await handle.wait_for_room()
            handle.add_entry_nowait(f"entry-{i}".encode(), lambda result: None)
        while handle.last_add_confirmed < total - 1:
            await trio.sleep(0.01)
        victim.kill()  # acknowledged by all three: durable in the victim's journal, maybe not checkpointed
        restarted = magnetar_processes.bookie(
            "bookie0-again",
            zookeeper_url,
            tmp_path / "bookie0",
            *STORAGE,
            "--port",
            str(port),
            env=BOOKIE_ENV,
        )
        assert restarted.ready["bookieId"] == victim.ready["bookieId"]
        async with open_tcp_transport() as transport:
            for entry_id in (0, total // 2, total - 1):
                answer = await call(
                    transport,
                    restarted.ready["bookieId"],
                    ReadRequest(entry_id + 1, handle.ledger_id, entry_id),
                )
                assert isinstance(answer, ReadResponse)
                assert answer.status is BookieStatus.EOK, answer
                assert answer.body.endswith(f"entry-{entry_id}".encode())
