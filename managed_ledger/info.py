"""Managed-ledger and cursor metadata, as Pulsar's ``ManagedLedgerInfo`` / ``ManagedCursorInfo``.

Stored in the metadata store at ``/managed-ledgers/<name>`` (the ledger list) and
``/managed-ledgers/<name>/<cursor>`` (each cursor), every write a versioned compare-and-set. Pulsar encodes
these as protobuf; we encode the same fields as JSON with a ``format`` number (the values are small and a
human reading ZooKeeper at 3 a.m. can understand them). Decoding is strict: unknown formats and malformed
values raise :class:`MetadataFormatError` rather than producing a half-valid object.

``LedgerInfo.first_index`` (``firstIndex``, absent when unknown) is the index of the ledger's first message:
with it, reopening a topic rebuilds its message indexes without reading entries (:mod:`.message_index`).

``LedgerInfo.timestamp_ms`` is 0 while the ledger is open and the close time once it is closed; retention
time is measured from it (Pulsar's ``LedgerInfo.timestamp``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.managed_ledger.position import EARLIEST, Position

FORMAT = 1


class MetadataFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int = 0
    size_bytes: int = 0
    timestamp_ms: int = 0
    first_index: int = -1
    """The index of the ledger's first message (see :mod:`.message_index`); -1: not recorded (a ledger
    listed before the index existed, or listed by a rollover before its first index was known)."""

    def grown(self, entries: int, size_bytes: int) -> LedgerInfo:
        """This ledger holding ``entries`` entries of ``size_bytes`` in all: every field spelled out, since it
        runs once per add and ``dataclasses.replace`` costs several times as much (a test checks it against
        ``replace`` field by field)."""
        return LedgerInfo(self.ledger_id, entries, size_bytes, self.timestamp_ms, self.first_index)

    def to_json(self) -> dict[str, int]:
        body = {
            "ledgerId": self.ledger_id,
            "entries": self.entries,
            "size": self.size_bytes,
            "timestamp": self.timestamp_ms,
        }
        if self.first_index >= 0:
            body["firstIndex"] = self.first_index
        return body

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerInfo:
        return cls(
            _int(data, "ledgerId"),
            _int(data, "entries"),
            _int(data, "size"),
            _int(data, "timestamp"),
            _int(data, "firstIndex", -1),
        )


@dataclass(frozen=True, slots=True)
class ManagedLedgerInfo:
    ledgers: tuple[LedgerInfo, ...] = ()
    terminated_position: Position | None = None
    properties: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "format": FORMAT,
            "ledgers": [info.to_json() for info in self.ledgers],
            "properties": dict(sorted(self.properties.items())),
        }
        if self.terminated_position is not None:
            body["terminatedPosition"] = str(self.terminated_position)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ManagedLedgerInfo:
        data = _load(raw)
        ledgers = data.get("ledgers", [])
        if not isinstance(ledgers, list):
            raise MetadataFormatError("'ledgers' must be a list")
        terminated = data.get("terminatedPosition")
        return cls(
            tuple(LedgerInfo.from_json(_obj(item)) for item in ledgers),
            None if terminated is None else Position.parse(str(terminated)),
            _str_map(data.get("properties", {})),
        )


@dataclass(frozen=True, slots=True)
class CursorInfo:
    """A cursor's persisted state. ``cursor_ledger_id == -1``: the snapshot below is authoritative."""

    cursor_ledger_id: int = -1
    mark_delete: Position = EARLIEST
    acked_ranges: tuple[tuple[int, int, int], ...] = ()  # (ledger, first, last) individually acked
    properties: dict[str, int] = field(default_factory=dict)
    last_active_ms: int = 0
    acked_prefix: tuple[int, int, int] | None = None
    """``(ledger, entry, k)``: the first ``k`` messages of the entry after mark-delete are acknowledged by
    batch index (a skip that ended inside an entry); ``batchAckedPrefix``, absent when None."""

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "cursorsLedgerId": self.cursor_ledger_id,
            "markDelete": str(self.mark_delete),
            "individualDeletedMessages": [list(r) for r in self.acked_ranges],
            "properties": dict(sorted(self.properties.items())),
            "lastActive": self.last_active_ms,
        }
        if self.acked_prefix is not None:
            body["batchAckedPrefix"] = list(self.acked_prefix)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CursorInfo:
        data = _load(raw)
        ranges = data.get("individualDeletedMessages", [])
        if not isinstance(ranges, list):
            raise MetadataFormatError("'individualDeletedMessages' must be a list")
        props = data.get("properties", {})
        if not isinstance(props, dict) or not all(isinstance(v, int) for v in props.values()):
            raise MetadataFormatError("'properties' must map names to integers")
        return cls(
            _int(data, "cursorsLedgerId"),
            Position.parse(str(data.get("markDelete", "-1:-1"))),
            tuple(_range(item) for item in ranges),
            {str(k): int(v) for k, v in props.items()},
            _int(data, "lastActive"),
            parse_acked_prefix(data.get("batchAckedPrefix")),
        )


def _load(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MetadataFormatError(f"metadata is not JSON: {exc}") from exc
    data = _obj(data)
    if data.get("format") != FORMAT:
        raise MetadataFormatError(f"unsupported metadata format {data.get('format')!r}")
    return data


def _obj(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MetadataFormatError(f"expected an object, got {type(value).__name__}")
    return value


def _int(data: dict[str, Any], key: str, default: int = 0) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MetadataFormatError(f"{key!r} must be an integer, got {value!r}")
    return value


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MetadataFormatError("'properties' must map strings to strings")
    return dict(value)


def _range(item: Any) -> tuple[int, int, int]:
    if (
        not isinstance(item, list)
        or len(item) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        or item[1] > item[2]
    ):
        raise MetadataFormatError(f"bad acknowledged range {item!r}")
    return item[0], item[1], item[2]


def parse_acked_prefix(item: Any) -> tuple[int, int, int] | None:
    """A batch-index ack ``[ledger, entry, k]`` (``k`` >= 1 leading messages), or None when absent."""
    if item is None:
        return None
    if (
        not isinstance(item, list)
        or len(item) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        or item[1] < 0
        or item[2] < 1
    ):
        raise MetadataFormatError(f"bad batch-index acknowledgement {item!r}")
    return item[0], item[1], item[2]
