"""Replication-client throughput over in-process bookies (no network, memory stores): the cost of the
client's own add pipeline and batch reads. Run: ``.venv/bin/python tests/bench/bench_client_local.py``.

Not a test (nothing is asserted); figures go to tests/bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.client import open_in_process_bookies

from magnetar.bookkeeper.client import BKError, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore


async def main(entries: int, payload_bytes: int, quorum: tuple[int, int, int]) -> None:
    metadata = MemoryMetadataStore()
    settings = ClientSettings(ensemble_size=quorum[0], write_quorum=quorum[1], ack_quorum=quorum[2])
    async with (
        open_in_process_bookies(metadata, quorum[0]) as cluster,
        open_bookkeeper(metadata, cluster.transport, settings) as bk,
    ):
        lh = await bk.create_ledger()
        payload = b"x" * payload_bytes
        done = trio.Event()

        def acked(outcome: int | BKError) -> None:
            if isinstance(outcome, BKError):
                raise SystemExit(f"add failed: {outcome!r}")
            if outcome == entries - 1:
                done.set()

        start = time.perf_counter()
        for _ in range(entries):
            await lh.wait_for_room()  # pending_adds_max in flight at most
            lh.add_entry_nowait(payload, acked)
        await done.wait()
        add_s = time.perf_counter() - start
        start = time.perf_counter()
        read = 0
        for first in range(0, entries, 10_000):
            read += len(await lh.read_entries(first, min(entries, first + 10_000) - 1))
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(1000):
            await lh.add_entry(payload)
        one_s = time.perf_counter() - start
    print(f"E/WQ/AQ={quorum} payload={payload_bytes}B entries={entries}")
    print(f"  pipelined adds: {entries / add_s:,.0f} entries/s")
    print(f"  batch reads:    {read / read_s:,.0f} entries/s")
    print(f"  sequential add_entry: {one_s / 1000 * 1e6:,.0f} us per add (in-process round trip)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--payload-bytes", type=int, default=100)
    args = parser.parse_args()
    for quorum in [(1, 1, 1), (3, 3, 2)]:
        trio.run(main, args.entries, args.payload_bytes, quorum)
