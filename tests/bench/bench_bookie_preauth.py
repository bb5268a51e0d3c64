"""What unauthenticated connections cost a bookie: RSS of a real ``magnetar bookie`` process with token
authentication on, before and while N connections each send a large frame without ever sending AUTH.

    .venv/bin/python tests/bench/bench_bookie_preauth.py [--connections 256] [--frame-mib 5]

Each connection announces a frame of ``--frame-mib`` MiB (just under the bookie's ``frame_bytes_max``, 5 MiB
by default) and sends its bytes without AUTH, in 64 KiB writes, until the bookie stops reading (TCP
back-pressure) or closes the connection. The bookie's RSS (``VmRSS``) and peak RSS (``VmHWM``) are read from
``/proc/<pid>/status`` before, once every sender is done or blocked, and after the connections closed. The
bookie is stopped by its pid. Not a test: figures go to tests/bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.processes import ProcessGroup

from magnetar.bookkeeper.protocol.frames import header_word
from magnetar.bookkeeper.protocol.status import OpCode
from magnetar.bookkeeper.runtime.auth.keys import create_secret_key

MIB = 1024 * 1024
WRITE_BYTES = 64 * 1024


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def frame_prefix(frame_bytes: int) -> bytes:
    """The length prefix and header of an ADD frame of ``frame_bytes`` (prefix included)."""
    return struct.pack(">iIq", frame_bytes - 4, header_word(OpCode.ADD_ENTRY), 1)


async def flood(port: int, frame_bytes: int, sent: list[int], closed: list[int], held: trio.Event) -> None:
    """Send one big frame without AUTH; stop when the bookie closes or stops reading for 2 s."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, WRITE_BYTES)
    data = frame_prefix(frame_bytes) + bytes(frame_bytes - 16)
    view = memoryview(data)
    total = 0
    try:
        while total < len(data):
            with trio.move_on_after(2) as scope:
                await stream.send_all(view[total : total + WRITE_BYTES])
            if scope.cancelled_caught:
                break  # blocked: the bookie no longer reads this connection
            total += min(WRITE_BYTES, len(data) - total)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        closed.append(1)
    sent.append(total)
    await held.wait()
    await stream.aclose()


async def attack(pid: int, port: int, connections: int, frame_bytes: int) -> None:
    held = trio.Event()
    sent: list[int] = []
    closed: list[int] = []
    before = rss_kib(pid)
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(flood, port, frame_bytes, sent, closed, held)
        while len(sent) < connections:
            await trio.sleep(0.2)
        await trio.sleep(1)  # let the bookie process what it received
        during = rss_kib(pid)
        held.set()
    await trio.sleep(2)
    after = rss_kib(pid)
    print(f"connections:               {connections} x {frame_bytes / MIB:.2f} MiB frames, no AUTH")
    print(f"bytes sent (until blocked): {sum(sent) / MIB:,.1f} MiB ({len(closed)} connections closed by it)")
    print(f"attack time:               {time.monotonic() - started:.1f} s")
    print(f"bookie RSS before:         {before[0] / 1024:,.1f} MiB")
    print(f"bookie RSS under attack:   {during[0] / 1024:,.1f} MiB (+{(during[0] - before[0]) / 1024:,.1f})")
    print(f"bookie peak RSS (VmHWM):   {during[1] / 1024:,.1f} MiB")
    print(f"bookie RSS after closing:  {after[0] / 1024:,.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--frame-mib", type=float, default=5.0)
    args = parser.parse_args()
    frame_bytes = int(args.frame_mib * MIB) - 1024
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        key = work / "secret.key"
        key.write_bytes(create_secret_key())
        group = ProcessGroup(work)
        try:
            bookie = group.bookie(
                "bookie",
                "memory://",
                work / "data",
                "--storage", "memory",
                "--authentication-enabled", "--token-secret-key", key.as_uri(),
                "--auth-allowed-roles", "broker",
            )  # fmt: skip
            port = int(bookie.ready["port"])
            trio.run(attack, bookie.pid, port, args.connections, frame_bytes)
        finally:
            group.stop_all()


if __name__ == "__main__":
    main()
