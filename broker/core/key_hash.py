"""Key hashing as Pulsar's clients and broker do it: partition routing and Key_Shared slots.

* ``JavaStringHash`` (the default ``hashingScheme`` of a producer): Java's ``String.hashCode`` over UTF-16
  code units, as a signed 32-bit int; the partition is ``signSafeMod(hash, n)``.
* ``Murmur3_32Hash``: MurmurHash3 x86 32-bit, seed 0, over the key's UTF-8 bytes, masked with
  ``Integer.MAX_VALUE``.
* Key_Shared: the broker hashes a message's key with Murmur3 into ``[0, 65536)`` slots
  (``STICKY_KEY_HASH_MAX_VALUE``); a message without a key uses the key ``NONE_KEY``, as Pulsar does.
"""

from __future__ import annotations

import struct

STICKY_KEY_SLOTS = 65536
NONE_KEY = "NONE_KEY"
_MASK32 = 0xFFFFFFFF
_BLOCKS = struct.Struct("<I")


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, signed 32-bit."""
    value = 0
    data = text.encode("utf-16-le")
    for (unit,) in struct.iter_unpack("<H", data):
        value = (value * 31 + unit) & _MASK32
    return value - (1 << 32) if value >> 31 else value


def _rotl(value: int, count: int) -> int:
    return ((value << count) | (value >> (32 - count))) & _MASK32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 as an unsigned 32-bit value."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & _MASK32
    length = len(data)
    tail_start = length - length % 4
    for (block,) in struct.iter_unpack("<I", data[:tail_start]):
        k = (block * c1) & _MASK32
        k = _rotl(k, 15)
        k = (k * c2) & _MASK32
        h ^= k
        h = _rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK32
    k = 0
    tail = data[tail_start:]
    for index in range(len(tail) - 1, -1, -1):
        k = (k << 8) | tail[index]
    if tail:
        k = (k * c1) & _MASK32
        k = _rotl(k, 15)
        k = (k * c2) & _MASK32
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h


def murmur3_hash(text: str) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: murmur3 of the UTF-8 bytes, masked to a non-negative int."""
    return murmur3_32(text.encode("utf-8")) & 0x7FFFFFFF


def sign_safe_mod(dividend: int, divisor: int) -> int:
    """Pulsar's ``MathUtils.signSafeMod``."""
    return dividend % divisor  # Python's % already has the divisor's sign


def partition_for_key(key: str, partitions: int, scheme: str | None) -> int:
    value = murmur3_hash(key) if scheme == "Murmur3_32Hash" else java_string_hash(key)
    return sign_safe_mod(value, partitions)


def sticky_key_slot(key: str | None) -> int:
    """The Key_Shared slot of a message's key."""
    return murmur3_hash(NONE_KEY if key is None else key) % STICKY_KEY_SLOTS


class HashRing:
    """Key_Shared's consumer selector (Pulsar's ``ConsistentHashingStickyKeyConsumerSelector``): each consumer
    puts ``points`` marks on the slot ring; a slot belongs to the first mark at or after it (wrapping). A
    consumer joining or leaving moves only the slots next to its own marks."""

    def __init__(self, points: int = 100) -> None:
        self._points = points
        self._marks: list[tuple[int, int]] = []  # (slot, member id), sorted
        self._members: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member_id: int, name: str, member: object) -> None:
        self._members[member_id] = member
        for index in range(self._points):
            slot = murmur3_hash(f"{name}{member_id}{index}") % STICKY_KEY_SLOTS
            self._marks.append((slot, member_id))
        self._marks.sort()

    def remove(self, member_id: int) -> None:
        self._members.pop(member_id, None)
        self._marks = [mark for mark in self._marks if mark[1] != member_id]

    def select(self, slot: int) -> object | None:
        if not self._marks:
            return None
        low, high = 0, len(self._marks)
        while low < high:
            mid = (low + high) // 2
            if self._marks[mid][0] < slot:
                low = mid + 1
            else:
                high = mid
        mark = self._marks[low % len(self._marks)]
        return self._members[mark[1]]
