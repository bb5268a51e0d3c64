"""The messages of one stored batch entry that a subscription has not acknowledged yet, one bit each.

A consumer may acknowledge the messages of a batch entry one by one (Pulsar's batch-index acknowledgement);
until the last one is acknowledged the subscription keeps, for that entry, which batch indexes are still
unacknowledged. The entry's size - how many messages it holds - always comes from what the broker stored
(the delivery it made, or the entry's message count in the managed ledger's message index), never from a
message id a client sent, so a partly acknowledged entry costs one bit per stored message: an entry of the
largest broker batch (65,535 messages) costs 8 KiB, as Pulsar's cursor keeps a bit set per entry too.

Sans-IO: a bytearray and a count; batch indexes outside ``0 .. size - 1`` are never in the set.
"""

from __future__ import annotations

from collections.abc import Iterable


class UnackedIndexes:
    """Batch indexes ``acked_prefix .. size - 1`` of an entry, less those discarded since."""

    __slots__ = ("_bits", "_count", "size")

    def __init__(self, size: int, acked_prefix: int = 0) -> None:
        if size < 0:
            raise ValueError(f"an entry holds no negative number of messages: {size}")
        prefix = min(max(acked_prefix, 0), size)
        self.size = size
        bits = ((1 << size) - 1) ^ ((1 << prefix) - 1)
        self._bits = bytearray(bits.to_bytes((size + 7) // 8, "little"))
        self._count = size - prefix

    def __len__(self) -> int:
        return self._count

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int) or not 0 <= index < self.size:
            return False
        return bool(self._bits[index >> 3] >> (index & 7) & 1)

    def discard(self, index: int) -> bool:
        """Mark batch index ``index`` acknowledged; False if it was not unacknowledged (or is not in the
        entry). Inline bit arithmetic: this runs once per acknowledged message."""
        if not 0 <= index < self.size:
            return False
        bits = self._bits
        byte = bits[index >> 3]
        mask = 1 << (index & 7)
        if not byte & mask:
            return False
        bits[index >> 3] = byte ^ mask
        self._count -= 1
        return True

    def discard_all(self, indexes: Iterable[int]) -> int:
        """:meth:`discard` each; how many were unacknowledged."""
        discard = self.discard
        return sum(1 for index in indexes if discard(index))
