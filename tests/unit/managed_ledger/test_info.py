from __future__ import annotations

import dataclasses

import pytest

from magnetar.managed_ledger.cursor_store import CursorSnapshot, decode_position_entry, encode_position_entry
from magnetar.managed_ledger.info import (
    CursorInfo,
    LedgerInfo,
    ManagedLedgerInfo,
    MetadataFormatError,
)
from magnetar.managed_ledger.position import InvalidPositionError, Position
from magnetar.managed_ledger.rollover import RolloverLimits, jittered_max_time_ms, ledger_is_full


def test_managed_ledger_info_round_trip() -> None:
    info = ManagedLedgerInfo(
        (LedgerInfo(3, 50_000, 5_000_000, 1234, first_index=77), LedgerInfo(9)),
        Position(3, 49_999),
        {"k": "v"},
    )
    assert ManagedLedgerInfo.decode(info.encode()) == info
    # a ledger listed before message indexes existed has no firstIndex: -1, "not recorded"
    assert ManagedLedgerInfo.decode(b'{"format":1,"ledgers":[{"ledgerId":3}]}').ledgers[0].first_index == -1
    assert b'"firstIndex":77' in info.encode()
    assert info.encode().count(b"firstIndex") == 1


def test_cursor_info_round_trip() -> None:
    cursor = CursorInfo(12, Position(3, 7), ((3, 9, 11), (4, 0, 0)), {"p": 1}, 99)
    assert CursorInfo.decode(cursor.encode()) == cursor
    skipped_into = CursorInfo(-1, Position(3, 7), (), {}, 99, acked_prefix=(3, 8, 5))
    assert CursorInfo.decode(skipped_into.encode()) == skipped_into


def test_cursor_position_entries_carry_the_batch_index_ack() -> None:
    snapshot = CursorSnapshot(Position(3, 7), ((3, 9, 11),), {"p": 1}, (3, 8, 5))
    assert decode_position_entry(encode_position_entry(snapshot), {"p": 1}) == snapshot
    older = b'{"markDelete":"3:7","ranges":[]}'  # written before batch-index acks: none
    assert decode_position_entry(older, {}).acked_prefix is None
    with pytest.raises(MetadataFormatError):
        decode_position_entry(b'{"markDelete":"3:7","ranges":[],"batchAckedPrefix":[3,8]}', {})


def test_cursor_position_entries_carry_their_properties() -> None:
    snapshot = CursorSnapshot(Position(3, 7), (), {"producer \u202e\x07": 2**63 - 1})
    assert decode_position_entry(encode_position_entry(snapshot), {"stale": 1}) == snapshot
    without = CursorSnapshot(Position(3, 7), (), {})
    assert decode_position_entry(encode_position_entry(without), {"meta": 1}).properties == {"meta": 1}
    for bad in (b'"properties":{"a":"1"}', b'"properties":[1]', b'"properties":{"a":true}'):
        with pytest.raises(MetadataFormatError):
            decode_position_entry(b'{"markDelete":"3:7","ranges":[],' + bad + b"}", {})


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"format": 99}',
        b'{"format": 1, "ledgers": {}}',
        b'{"format": 1, "ledgers": [{"ledgerId": "x"}]}',
        b'{"format": 1, "ledgers": [], "properties": {"a": 1}}',
    ],
)
def test_malformed_ledger_info_is_rejected(raw: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        ManagedLedgerInfo.decode(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"format": 1, "individualDeletedMessages": [[1, 5, 2]]}',
        b'{"format": 1, "individualDeletedMessages": [[1, 2]]}',
        b'{"format": 1, "properties": {"a": "b"}}',
        b'{"format": 1, "batchAckedPrefix": [3, 8, 0]}',
        b'{"format": 1, "batchAckedPrefix": [3, 8]}',
    ],
)
def test_malformed_cursor_info_is_rejected(raw: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        CursorInfo.decode(raw)


def test_position_text_form() -> None:
    assert str(Position(3, -1)) == "3:-1"
    assert Position.parse("7:12") == Position(7, 12)
    assert Position(1, 5) < Position(2, 0) < Position(2, 1)
    for bad in ("", "1", "a:b", "1:-2"):
        with pytest.raises(InvalidPositionError):
            Position.parse(bad)


LIMITS = RolloverLimits(max_entries=100, max_size_bytes=1000, max_time_ms=60_000, min_time_ms=10_000)


@pytest.mark.parametrize(
    ("entries", "size", "age_ms", "full"),
    [
        (0, 0, 10**9, False),  # empty ledgers never roll
        (100, 10, 0, True),  # the entry cap ignores the minimum age
        (99, 10, 0, False),
        (10, 1000, 5_000, False),  # size, but younger than the minimum age
        (10, 1000, 10_000, True),
        (10, 10, 60_000, True),  # age
        (10, 10, 59_999, False),
    ],
)
def test_rollover_rule(entries: int, size: int, age_ms: int, full: bool) -> None:
    assert ledger_is_full(LIMITS, entries, size, age_ms) is full


def test_rollover_jitter_extends_the_deadline() -> None:
    deadline = jittered_max_time_ms(LIMITS, 0.5, 0.05)
    assert deadline == 61_500
    assert not ledger_is_full(LIMITS, 10, 10, 61_000, deadline)
    assert ledger_is_full(LIMITS, 10, 10, 61_500, deadline)
    with pytest.raises(ValueError):
        RolloverLimits(min_time_ms=10, max_time_ms=5)


def test_grown_keeps_every_other_field_as_replace_does() -> None:
    """``grown`` spells the fields out for speed: a field added to LedgerInfo and forgotten there would be
    reset to its default on every add."""
    values = {field.name: 1000 + number for number, field in enumerate(dataclasses.fields(LedgerInfo))}
    info = LedgerInfo(**values)
    assert info.grown(7, 4096) == dataclasses.replace(info, entries=7, size_bytes=4096)
