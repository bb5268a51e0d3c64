"""Per-frame costs of the binary producer path: one SEND frame of 100 plain 100-byte messages.

Run: ``.venv/bin/python tests/bench/bench_binary_frames.py`` - prints microseconds per frame for building the
frame (client), unmasking it (C and pure Python), validating it (broker) and storing five of them as one
compact batch entry. Not a test.
"""

from __future__ import annotations

import os
import timeit

from magnetar.bookkeeper.runtime.http.ws_frames import mask, mask_python
from magnetar.broker.wire.entry_format import encode_compact_batch
from magnetar.broker.wire.magnetar_v1 import encode_send, parse_send

MESSAGES = 100
PAYLOAD_BYTES = 100
REPEATS = 20_000


def per_call_us(fn: object) -> float:
    assert callable(fn)
    return timeit.timeit(fn, number=REPEATS) / REPEATS * 1e6


def main() -> None:
    payloads = [os.urandom(PAYLOAD_BYTES) for _ in range(MESSAGES)]
    frame = encode_send(1, payloads)
    key = os.urandom(4)
    run = parse_send(frame).run
    bodies = [run.body] * 5
    print(f"one SEND frame: {MESSAGES} x {PAYLOAD_BYTES} B = {len(frame):,} bytes")
    print(f"  encode_send (client)                   {per_call_us(lambda: encode_send(1, payloads)):7.1f} us")
    print(f"  mask (websockets C apply_mask)         {per_call_us(lambda: mask(frame, key)):7.1f} us")
    print(f"  mask_python (fallback)                 {per_call_us(lambda: mask_python(frame, key)):7.1f} us")
    print(f"  parse_send (validation, broker)        {per_call_us(lambda: parse_send(frame)):7.1f} us")
    compact = per_call_us(lambda: encode_compact_batch("producer-1", 7, 1_700_000_000_000, 500, bodies))
    print(f"  encode_compact_batch of 5 frames       {compact:7.1f} us")


if __name__ == "__main__":
    main()
