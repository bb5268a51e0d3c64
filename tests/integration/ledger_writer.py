"""A ledger writer in its own process, for the replication failure tests.

Usage: ``python ledger_writer.py METADATA_URL COUNT [--pause-after N]``. Creates a ledger (E=3 W=3 A=2),
prints ``{"ledgerId": ...}``, then adds COUNT entries (pipelined, payload ``entry-<id>``) and prints a line
per acknowledged batch: ``{"acked": [ids...]}``; a failed add prints ``{"failed": id, "error": "..."}``.
With ``--pause-after N`` it stops adding after N acknowledged entries, prints ``{"paused": true}`` and waits
for a line on stdin before sending the remaining entries (so a test can fence it in between).
"""

from __future__ import annotations

import argparse
import json
import sys

import trio

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store


def emit(document: object) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


async def write(url: str, count: int, pause_after: int | None) -> None:
    settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with (
        open_metadata_store(url) as metadata,
        open_tcp_transport() as transport,
        open_bookkeeper(metadata, transport, settings) as bk,
    ):
        handle = await bk.create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2, password=b"pw")
        emit({"ledgerId": handle.ledger_id})
        acked: list[int] = []
        settled = 0
        everything = trio.Event()

        def on_add(result: int | Exception) -> None:
            nonlocal settled
            settled += 1
            if isinstance(result, Exception):
                emit({"failed": settled - 1, "error": f"{type(result).__name__}: {result}"})
            else:
                acked.append(result)
            if settled == count:
                everything.set()

        first_part = count if pause_after is None else pause_after
        for i in range(first_part):
            await handle.wait_for_room()
            handle.add_entry_nowait(f"entry-{i}".encode(), on_add)
            if len(acked) >= 200:
                emit({"acked": acked[:]})
                acked.clear()
        if pause_after is not None:
            while settled < pause_after:
                await trio.sleep(0.001)
            emit({"acked": acked[:]})
            acked.clear()
            emit({"paused": True})
            await trio.to_thread.run_sync(sys.stdin.readline)
            for i in range(pause_after, count):
                handle.add_entry_nowait(f"entry-{i}".encode(), on_add)
        await everything.wait()
        emit({"acked": acked[:]})
        emit({"done": True})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("metadata_url")
    parser.add_argument("count", type=int)
    parser.add_argument("--pause-after", type=int)
    args = parser.parse_args()
    trio.run(write, args.metadata_url, args.count, args.pause_after)


if __name__ == "__main__":
    main()
