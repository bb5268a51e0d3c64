"""Namespace bundles: how Pulsar assigns a topic to a slice of its namespace's 32-bit hash ring.

A namespace is split into bundles by boundaries on ``[0x00000000, 0xffffffff]`` (``NamespaceBundles``). The
default split into ``n`` equal bundles is Pulsar's ``getBundles(numBundles)``: ``segment = 2**32 // n``,
boundaries ``0, segment, 2*segment, ...`` and the last boundary ``0xffffffff``; each bundle is
``[lower, upper)`` except the last, which also contains ``0xffffffff``. The broker default is
``defaultNumberOfNamespaceBundles = 4``.

Hash function: Pulsar's broker builds its ``NamespaceBundleFactory`` with Guava's ``Hashing.crc32()`` and
hashes the topic's full name (``persistent://tenant/ns/topic``) as UTF-8; ``padToLong`` makes the 32-bit
CRC an unsigned value. That is exactly ``zlib.crc32(name.encode())`` (CRC-32/ISO-HDLC, the zlib/PNG CRC —
not the CRC32C used for entry digests). A bundle is named ``0x%08x_0x%08x`` (lower_upper), e.g. the full range
``0x00000000_0xffffffff`` answered by the lookup ``.../bundle`` endpoint.

A partition (``x-partition-i``) hashes by its own full name, as in Pulsar: the partitions of a topic fall
into different bundles and, with the load manager spreading bundles, onto different brokers. A WebSocket
session on a partitioned topic is served by whichever broker the client reached, through one upstream
session per partition on that partition's owner
(:mod:`magnetar.broker.owner_proxy.fanout`); admin calls on a partitioned topic ask each
partition's owner (:mod:`magnetar.admin.rest.partitions`).
"""

from __future__ import annotations

import bisect
import itertools
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.broker.wire import InvalidTopicNameError, TopicName

_HEX_BOUND = re.compile(r"0[xX][0-9a-fA-F]{1,8}", re.ASCII)
"""A bundle bound as a range name spells it: ``0x`` and at most 8 ASCII hex digits (``int(text, 16)`` alone
would also take ``0x_1``, spaces and non-ASCII digits)."""

FULL_LOWER_BOUND = 0x00000000
FULL_UPPER_BOUND = 0xFFFFFFFF
DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES = 4
BUNDLES_MAX = 1024
"""Most bundles a namespace may be split into. Pulsar's ``getBundles`` accepts up to 2^32; every bundle costs
an ownership node and a boundary held by every broker, so Magnetar bounds it here, for the admin API, the
broker's ``default_number_of_namespace_bundles`` and ``initialize-cluster-metadata`` alike."""


def topic_hash(topic: TopicName) -> int:
    """The topic's position on the bundle ring: CRC-32 of its full name (a partition's own name)."""
    return zlib.crc32(str(topic).encode("utf-8"))


def bundle_boundaries(num_bundles: int = DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES) -> list[int]:
    """The ``num_bundles + 1`` boundaries of an evenly split namespace (Pulsar's ``getBundles``)."""
    if not 0 < num_bundles <= BUNDLES_MAX:
        raise ValueError(f"Invalid number of bundles: it has to be in the range of (0, {BUNDLES_MAX}].")
    segment = 2**32 // num_bundles
    bounds = [i * segment for i in range(num_bundles)]
    bounds.append(FULL_UPPER_BOUND)
    return bounds


@dataclass(frozen=True, slots=True, order=True)
class NamespaceBundle:
    lower: int
    upper: int
    """Exclusive, except for the last bundle whose upper bound ``0xffffffff`` is included."""

    def __post_init__(self) -> None:
        if not FULL_LOWER_BOUND <= self.lower <= self.upper <= FULL_UPPER_BOUND:
            raise ValueError(f"invalid bundle range {self.lower:#x}..{self.upper:#x}")

    @property
    def range_name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def __str__(self) -> str:
        return self.range_name

    def contains(self, hash_value: int) -> bool:
        if self.upper == FULL_UPPER_BOUND:
            return self.lower <= hash_value <= self.upper
        return self.lower <= hash_value < self.upper

    @classmethod
    def parse(cls, range_name: str) -> NamespaceBundle:
        """``0x00000000_0x40000000`` -> bundle (Pulsar's ``NamespaceBundleFactory.getBundle``)."""
        lower, sep, upper = range_name.partition("_")
        try:
            if not (sep and _HEX_BOUND.fullmatch(lower) and _HEX_BOUND.fullmatch(upper)):
                raise ValueError
            return cls(int(lower, 16), int(upper, 16))
        except ValueError:
            raise InvalidTopicNameError(f"Invalid bundle range: {range_name!r}") from None


def bundles_of(boundaries: Sequence[int]) -> list[NamespaceBundle]:
    if len(boundaries) < 2:
        raise ValueError("Need to specify at least 2 boundaries")
    if list(boundaries) != sorted(boundaries):
        raise ValueError("bundle boundaries must be ascending")
    return [NamespaceBundle(lo, hi) for lo, hi in itertools.pairwise(boundaries)]


def find_bundle(topic: TopicName, boundaries: Sequence[int]) -> NamespaceBundle:
    """The bundle of ``boundaries`` (as from :func:`bundle_boundaries`) that owns ``topic``."""
    return bundle_for_hash(topic_hash(topic), boundaries)


def bundle_for_hash(hash_value: int, boundaries: Sequence[int]) -> NamespaceBundle:
    if len(boundaries) < 2:
        raise ValueError("Need to specify at least 2 boundaries")
    if not boundaries[0] <= hash_value <= boundaries[-1]:
        raise ValueError(f"hash {hash_value:#x} outside the namespace range")
    index = bisect.bisect_right(boundaries, hash_value) - 1
    index = min(index, len(boundaries) - 2)  # the last bundle includes its upper boundary
    return NamespaceBundle(boundaries[index], boundaries[index + 1])


def split_in_half(bundle: NamespaceBundle, boundaries: Sequence[int]) -> list[int]:
    """``boundaries`` with ``bundle``'s middle added (Pulsar's ``range_equally_divide`` split).

    Raises :class:`ValueError` when ``bundle`` is not one of the bundles of ``boundaries`` (the namespace
    changed meanwhile) or has no middle."""
    lower_index = bisect.bisect_left(boundaries, bundle.lower)
    if (
        lower_index + 1 >= len(boundaries)
        or boundaries[lower_index] != bundle.lower
        or boundaries[lower_index + 1] != bundle.upper
    ):
        raise ValueError(f"{bundle} is not a bundle of the namespace")
    if bundle.upper - bundle.lower < 2:
        raise ValueError(f"{bundle} is too small to split")
    middle = bundle.lower + (bundle.upper - bundle.lower) // 2
    return [*boundaries[: lower_index + 1], middle, *boundaries[lower_index + 1 :]]
