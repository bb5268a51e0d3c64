"""Offsets of the Spark source: per topic partition, the last consumed entry ``(ledgerId, entryId)``.

Spark keeps a source's offsets as JSON text in the checkpoint and compares them as text, so the form must be
canonical: :func:`to_offset` builds the dict with every key sorted, at both levels::

    {"persistent://public/default/orders-partition-0": {"entryId": 41, "ledgerId": 12},
     "persistent://public/default/orders-partition-1": {"entryId": -1, "ledgerId": -1}}

Each value is the position of the last entry the query consumed (Pulsar's admin ``MessageId`` JSON without
``partitionIndex``, so ``GET .../lastMessageId`` output can be pasted back as a starting offset); a batch
covers the entries after the start offset up to and including the end offset. ``{-1, -1}`` means nothing
consumed yet: the partition is read from its earliest stored entry. Whole entries are the unit - an entry
that holds a broker-side batch of messages is consumed in one piece.

``startingOffsets`` / ``endingOffsets`` take ``earliest``, ``latest`` or JSON whose keys are topic-partition
names (full or short) and whose values are ``"earliest"``, ``"latest"``, ``{"ledgerId": L, "entryId": E}``
or ``[L, E]``. :func:`parse_offset_spec` checks the text; resolving ``latest`` needs the broker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from magnetar.broker.wire import InvalidTopicNameError, parse_topic_name

Position = tuple[int, int]
"""``(ledgerId, entryId)`` of the last consumed entry."""
EARLIEST: Position = (-1, -1)
INT64_MAX = 2**63 - 1
Boundary = Literal["earliest", "latest"]


class OffsetError(ValueError):
    """Offsets JSON that does not have the documented shape."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest`` / ``latest`` for every partition, or a per-partition map (partitions it does not name
    take ``default``)."""

    default: Boundary
    partitions: tuple[tuple[str, Position | Boundary], ...] = ()

    def for_partition(self, name: str) -> Position | Boundary:
        return dict(self.partitions).get(name, self.default)


def parse_offset_spec(text: str, unnamed: Boundary = "earliest") -> OffsetSpec:
    """``earliest``, ``latest`` or per-partition JSON; partitions the JSON does not name take ``unnamed``."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return OffsetSpec(stripped.lower())  # type: ignore[arg-type]
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ValueError(f"expected earliest, latest or JSON, got {text!r} ({exc.msg})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"the JSON must be an object of topic partition -> offset, got {text!r}")
    partitions: dict[str, Position | Boundary] = {}
    for key, value in data.items():
        try:
            name = str(parse_topic_name(key))
        except InvalidTopicNameError as exc:
            raise ValueError(f"{key!r} is not a topic partition name: {exc}") from None
        partitions[name] = _spec_value(key, value)
    return OffsetSpec(unnamed, tuple(sorted(partitions.items())))


def _spec_value(key: str, value: Any) -> Position | Boundary:
    if value in ("earliest", "latest"):
        return value  # type: ignore[no-any-return]
    try:
        return position_of(value)
    except OffsetError as exc:
        raise ValueError(f'offset of {key!r}: {exc}; or use "earliest" / "latest"') from None


def _entry_id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= INT64_MAX:
        raise OffsetError(f"{what} must be an integer from -1 to 2**63-1, got {value!r}")
    return value


def position_of(value: Any) -> Position:
    """``{"ledgerId": L, "entryId": E}`` or ``[L, E]`` as a position (other keys are refused)."""
    if isinstance(value, dict):
        if set(value) - {"ledgerId", "entryId", "partitionIndex"} or not {"ledgerId", "entryId"} <= set(
            value
        ):
            raise OffsetError(f'expected {{"ledgerId": L, "entryId": E}}, got {json.dumps(value)}')
        pair = (value["ledgerId"], value["entryId"])
    elif isinstance(value, list) and len(value) == 2:
        pair = (value[0], value[1])
    else:
        raise OffsetError(f'expected {{"ledgerId": L, "entryId": E}}, got {json.dumps(value)}')
    ledger, entry = _entry_id(pair[0], "ledgerId"), _entry_id(pair[1], "entryId")
    if ledger == -1 and entry != -1:
        raise OffsetError(f"ledgerId -1 (earliest) needs entryId -1, got {entry}")
    return ledger, entry


def to_offset(positions: Mapping[str, Position]) -> dict[str, dict[str, int]]:
    """The canonical offset dict (sorted keys at both levels)."""
    return {
        name: {"entryId": positions[name][1], "ledgerId": positions[name][0]} for name in sorted(positions)
    }


def from_offset(offset: Any) -> dict[str, Position]:
    """Read back an offset Spark stored (raises :class:`OffsetError` for anything but our own shape)."""
    if not isinstance(offset, dict):
        raise OffsetError(f"an offset must be a JSON object, got {json.dumps(offset)}")
    out: dict[str, Position] = {}
    for name, value in offset.items():
        if not isinstance(name, str):
            raise OffsetError(f"offset keys are topic partition names, got {name!r}")
        out[name] = position_of(value)
    return out
