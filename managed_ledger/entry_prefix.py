"""The message index prefix: the few bytes the managed ledger writes in front of every entry it stores.

Theory of operation. A managed ledger numbers messages, not entries (see :mod:`.message_index`): every entry
gets the index of its first message, and the managed ledger stores that index in front of the entry's bytes
as it adds the entry, so that a reader of the entry (a topic reopened after a crash, a coarse ledger's
bisection, a Spark worker) learns where the entry stands without any other record. Pulsar's broker does the
same with its broker entry metadata (a magic ``0x0e02`` and a ``BrokerEntryMetadata`` holding the index,
written by a managed-ledger interceptor in front of the client's bytes). Here the prefix is the managed
ledger's own; the bytes behind it - the *body* - are its writer's (the broker's entry format): the managed
ledger never parses them, it only asks their format how many messages a body holds (:class:`EntryIndexing`,
handed to it by the composition root), to learn where the next entry starts::

    stored := prefix body
    prefix := magic "Mi" | first_index i64 (little-endian, 0 .. 2^63 - 1)

Entries written before the prefix existed have none: their stored bytes are the body. The broker's bodies
begin with their own magic ``"Mg"``, so the two magics tell the cases apart on the first two bytes. This
module is the only place that writes, reads or skips the prefix: the managed ledger, the admin paths that
read stored entries, and the Spark source (which imports it without the server: nothing here imports
anything but the standard library).

Copies. :func:`encode_prefix` returns the 10 prefix bytes alone: the managed ledger sends them to the
bookies as one part in front of the body (see ``bookkeeper.protocol.digest``), so a stamp costs no copy of
the body. :func:`split` gives the body back as a ``memoryview`` slice of the stored bytes: no copy either.

Hostile bytes. A stored entry comes from bookies whose digest was verified, but it is still parsed as input:
a truncated prefix or a negative index raises :class:`EntryPrefixError` (a ``ValueError``), never an
``IndexError`` or a wrong answer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

MAGIC = b"Mi"
PREFIX = struct.Struct("<2sq")
"""The prefix: the magic and the index of the entry's first message."""
SIZE = PREFIX.size
"""10 bytes."""
FIRST_INDEX_MAX = 2**63 - 1


class EntryPrefixError(ValueError):
    """Stored bytes whose message index prefix is truncated or names a negative index."""


@dataclass(frozen=True, slots=True)
class EntryIndexing:
    """How a managed ledger learns how many messages an entry's body holds (the body's format is its
    writer's; the prefix, its stamping and its stripping are the managed ledger's own, in this module).

    A managed ledger given one stamps every entry it adds with the prefix and strips it from every entry it
    reads; one without stores the writer's bytes as they are (counts then live in memory only)."""

    messages_in: Callable[[bytes | memoryview], int]
    """How many messages a body holds (reads its head only); ``ValueError`` for bytes of another format."""


def encode_prefix(first_index: int) -> bytes:
    """The prefix of an entry whose first message is message ``first_index`` of the managed ledger."""
    if not 0 <= first_index <= FIRST_INDEX_MAX:
        raise ValueError(f"a message index is in 0..{FIRST_INDEX_MAX}, not {first_index}")
    return PREFIX.pack(MAGIC, first_index)


def first_index_of(stored: bytes | bytearray | memoryview) -> int | None:
    """The index of a stored entry's first message; None for an entry without the prefix."""
    if stored[:2] != MAGIC:
        return None
    if len(stored) < SIZE:
        raise EntryPrefixError(f"stored entry of {len(stored)} bytes ends inside its message index prefix")
    first: int = PREFIX.unpack_from(stored)[1]
    if first < 0:
        raise EntryPrefixError(f"stored entry names a negative message index {first}")
    return first


def split(stored: bytes | memoryview) -> tuple[int | None, bytes | memoryview]:
    """A stored entry's first index (None without a prefix) and its body: a ``memoryview`` slice of
    ``stored`` after the prefix (no copy), or ``stored`` itself for an entry without one."""
    first = first_index_of(stored)
    return (None, stored) if first is None else (first, memoryview(stored)[SIZE:])
