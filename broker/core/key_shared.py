"""Key_Shared consumer selection: which consumer of a Key_Shared subscription a key's slot goes to.

A Key_Shared subscription runs in one of Pulsar's two ``keySharedMode`` values, set by its first consumer and
kept while it has consumers (a consumer asking for the other mode is refused, ``ConsumerBusy``):

* **auto-split** (``AUTO_SPLIT``, the default): the broker spreads the slots ``[0, 65536)`` over the
  consumers on a consistent-hash ring (:class:`~.key_hash.HashRing`); every slot has an owner.
* **sticky** (``STICKY``): each consumer names the slot ranges it takes (``hashRanges``, each ``[start, end]``
  inclusive within ``[0, 65535]``); a slot goes to the consumer whose range holds it (:class:`StickyRanges`).
  A range that overlaps another consumer's - or another of the same consumer's - is refused with
  :class:`~.errors.ConsumerAssignError` ("Range conflict with consumer ..."), as are an empty list, ``start >
  end``, a bound outside the slots and more than :data:`STICKY_RANGES_MAX` ranges. A slot no consumer covers
  has no owner: its messages are held (in the subscription's redelivery set) until a consumer covering it
  joins, as Pulsar's sticky selector holds them.

The dispatcher asks :meth:`KeySharedSelector.select` once per message (a bisection over the ranges, or over
the ring's marks); joining and leaving are the only writes. Slots are the keys' Murmur3 hash modulo 65536
(:func:`~.key_hash.sticky_key_slot`).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from magnetar.broker.core.errors import ConsumerAssignError, ConsumerBusyError
from magnetar.broker.core.key_hash import STICKY_KEY_SLOTS, HashRing

STICKY_RANGES_MAX = 1024
"""Hash ranges one sticky consumer may name (Pulsar sets no bound; a client that needs more slots can name
wider ranges)."""


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    """What a Key_Shared consumer asks for: ``sticky_ranges`` None is auto-split, else the sticky ranges as
    sent (validated when the consumer joins); ``allow_out_of_order`` is Pulsar's
    ``allowOutOfOrderDelivery`` (accepted; Magnetar keeps per-key order regardless, which it permits)."""

    sticky_ranges: tuple[tuple[int, int], ...] | None = None
    allow_out_of_order: bool = False

    @property
    def mode(self) -> str:
        return "AUTO_SPLIT" if self.sticky_ranges is None else "STICKY"


AUTO_SPLIT = KeySharedPolicy()


def check_ranges(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """The ranges sorted by start, once they are valid and disjoint (else :class:`ConsumerAssignError`)."""
    if not ranges:
        raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
    if len(ranges) > STICKY_RANGES_MAX:
        raise ConsumerAssignError(
            f"Too many hash ranges for KeyShared policy: {len(ranges)} (at most {STICKY_RANGES_MAX})"
        )
    for start, end in ranges:
        if start > end:
            raise ConsumerAssignError(f"Fixed hash range start > end: [{start}, {end}]")
        if start < 0 or end >= STICKY_KEY_SLOTS:
            raise ConsumerAssignError(
                f"Fixed hash range [{start}, {end}] is outside [0, {STICKY_KEY_SLOTS - 1}]"
            )
    ordered = sorted(ranges)
    for (_, end), (start, _) in itertools.pairwise(ordered):
        if start <= end:
            raise ConsumerAssignError(f"Fixed hash ranges of one consumer overlap at {start}")
    return ordered


class StickyRanges:
    """Pulsar's ``HashRangeExclusiveStickyKeyConsumerSelector``: disjoint inclusive slot ranges, each owned by
    one consumer. ``add`` refuses a conflict before changing anything; ``select`` bisects the starts."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ranges: list[tuple[int, int, int]] = []  # (start, end, member id), sorted by start
        self._members: dict[int, tuple[str, object]] = {}

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member_id: int, name: str, ranges: tuple[tuple[int, int], ...], member: object) -> None:
        for start, end in check_ranges(ranges):
            index = bisect.bisect_right(self._starts, end)
            if index and self._ranges[index - 1][1] >= start:  # the last range starting at or before end
                other = self._members[self._ranges[index - 1][2]][0]
                raise ConsumerAssignError(f"Range conflict with consumer {other}")
        self._members[member_id] = (name, member)
        for start, end in ranges:
            index = bisect.bisect_left(self._starts, start)
            self._starts.insert(index, start)
            self._ranges.insert(index, (start, end, member_id))

    def remove(self, member_id: int) -> None:
        if self._members.pop(member_id, None) is None:
            return
        self._ranges = [entry for entry in self._ranges if entry[2] != member_id]
        self._starts = [entry[0] for entry in self._ranges]

    def select(self, slot: int) -> object | None:
        index = bisect.bisect_right(self._starts, slot) - 1
        if index < 0:
            return None
        _, end, member_id = self._ranges[index]
        return self._members[member_id][1] if slot <= end else None


class KeySharedSelector:
    """The consumer selector of one Key_Shared subscription, in its consumers' mode (module docstring)."""

    def __init__(self) -> None:
        self._policy = AUTO_SPLIT
        self._selector: HashRing | StickyRanges = HashRing()

    def __len__(self) -> int:
        return len(self._selector)

    def add(self, member_id: int, name: str, policy: KeySharedPolicy | None, member: object) -> None:
        """Take a consumer (``policy`` None: auto-split); raises before changing anything when refused."""
        policy = policy or AUTO_SPLIT
        if len(self._selector) and policy.mode != self._policy.mode:
            raise ConsumerBusyError(
                f"Subscription is in {self._policy.mode} key shared mode, "
                f"the consumer asked for {policy.mode}"
            )
        if not len(self._selector):
            self._policy = policy
            self._selector = HashRing() if policy.sticky_ranges is None else StickyRanges()
        selector = self._selector
        if isinstance(selector, StickyRanges):
            assert policy.sticky_ranges is not None
            selector.add(member_id, name, policy.sticky_ranges, member)
        else:
            selector.add(member_id, name, member)

    def remove(self, member_id: int) -> None:
        self._selector.remove(member_id)

    def select(self, slot: int) -> object | None:
        return self._selector.select(slot)
