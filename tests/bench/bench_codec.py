"""Codec throughput: encode and decode 100k ADD_ENTRY requests and responses (100-byte payloads).

Run: ``.venv/bin/python tests/bench/bench_codec.py`` - prints messages/s per direction. Not a test.
"""

from __future__ import annotations

import struct
import time

from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol, ServerProtocol
from magnetar.bookkeeper.protocol.messages import AddRequest, AddResponse
from magnetar.bookkeeper.protocol.status import BookieStatus

COUNT = 100_000
CHUNK_BYTES = 256 * 1024


def _rate(seconds: float) -> str:
    return f"{COUNT / seconds:>12,.0f}/s"


def main() -> None:
    key = bytes(20)
    requests = [AddRequest(i + 1, 5, i, key, struct.pack(">qq", 5, i) + bytes(100)) for i in range(COUNT)]
    responses = [AddResponse(i + 1, BookieStatus.EOK, 5, i) for i in range(COUNT)]
    client, server = ClientProtocol(), ServerProtocol()

    started = time.perf_counter()
    wire = bytearray()
    for request in requests:
        client.send_into(wire, request)
    print("encode requests ", _rate(time.perf_counter() - started))

    data = bytes(wire)
    started = time.perf_counter()
    decoded = 0
    for offset in range(0, len(data), CHUNK_BYTES):
        server.receive_data(data[offset : offset + CHUNK_BYTES])
        while server.next_event() is not NEED_DATA:
            decoded += 1
    print("decode requests ", _rate(time.perf_counter() - started))
    assert decoded == COUNT

    started = time.perf_counter()
    wire = bytearray()
    for response in responses:
        server.send_into(wire, response)
    print("encode responses", _rate(time.perf_counter() - started))

    data = bytes(wire)
    started = time.perf_counter()
    for offset in range(0, len(data), CHUNK_BYTES):
        client.receive_data(data[offset : offset + CHUNK_BYTES])
        while client.next_event() is not NEED_DATA:
            pass
    print("decode responses", _rate(time.perf_counter() - started))


if __name__ == "__main__":
    main()
