"""Pulsar's DateFormatter (ISO_OFFSET_DATE_TIME) for publishTime/eventTime."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.wire.date_format import DateParseError, UtcTimestamps, format_timestamp, parse_timestamp

PDT = timezone(timedelta(hours=-7))


def test_pulsar_doc_example_round_trips() -> None:
    ms = parse_timestamp("2021-10-29T16:01:38.967-07:00")
    assert ms == 1635548498967
    assert format_timestamp(ms, PDT) == "2021-10-29T16:01:38.967-07:00"
    assert format_timestamp(ms) == "2021-10-29T23:01:38.967Z"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),  # Java prints no fraction for a whole second
        (900, "1970-01-01T00:00:00.9Z"),  # ... and strips trailing zeros
        (10, "1970-01-01T00:00:00.01Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
    ],
)
def test_fraction_digits_like_java(ms: int, text: str) -> None:
    assert format_timestamp(ms) == text
    assert parse_timestamp(text) == ms


def test_offsets() -> None:
    assert format_timestamp(0, timezone(timedelta(hours=5, minutes=30))) == "1970-01-01T05:30:00+05:30"
    assert parse_timestamp("1970-01-01T05:30+05:30") == 0  # seconds are optional when parsing
    assert parse_timestamp("1970-01-01t00:00:00.123456789z") == 123  # case-insensitive, nanos truncated


@pytest.mark.parametrize(
    "text",
    [
        "2021-10-29",
        "2021-10-29T16:01:38",  # no offset
        "2021-10-29 16:01:38Z",
        "2021-13-01T00:00:00Z",
        "2021-02-30T00:00:00Z",
        "2021-10-29T16:01:38.1234567890Z",
        "2021-10-29T16:01:38+19:00",
        "1635548498967",
        "",
    ],
)
def test_unparseable(text: str) -> None:
    with pytest.raises(DateParseError):
        parse_timestamp(text)


@given(st.integers(min_value=-(10**12), max_value=10**13))
def test_round_trip(ms: int) -> None:
    assert parse_timestamp(format_timestamp(ms)) == ms
    assert parse_timestamp(format_timestamp(ms, PDT)) == ms


@given(st.lists(st.integers(-(2**41), 2**44), max_size=30), st.integers(0, 2000))
def test_utc_timestamps_of_a_stream_are_format_timestamp(stamps: list[int], step: int) -> None:
    """Whole seconds, fractions with trailing zeros, negative times, and runs within one second."""
    times = UtcTimestamps()
    for ms in [*stamps, *(stamps[0] + step * i for i in range(5) if stamps)]:
        assert times.format(ms) == format_timestamp(ms).encode("ascii")
    assert times.format(1_000) == b"1970-01-01T00:00:01Z"
    assert times.format(1_120) == b"1970-01-01T00:00:01.12Z"
    assert times.format(-5) == b"1969-12-31T23:59:59.995Z"


@given(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -7 * 60, 5 * 60 + 30]))
def test_any_long_is_formatted_and_read_back_where_python_can(ms: int, offset_minutes: int) -> None:
    """Java formats every ``long`` of milliseconds; so does this (years past 9999 with a sign), and where a
    ``datetime`` can hold the instant the text parses back to it."""
    tz = timezone(timedelta(minutes=offset_minutes))
    text = format_timestamp(ms, tz)
    if text[0] not in "+-" and not text.startswith("0000"):  # years 1-9999
        assert parse_timestamp(text) == ms


def test_the_ends_of_a_long_are_javas_texts() -> None:
    assert format_timestamp(2**63 - 1) == "+292278994-08-17T07:12:55.807Z"
    assert format_timestamp(-(2**63)) == "-292275055-05-16T16:47:04.192Z"
    assert format_timestamp(253_402_300_800_000) == "+10000-01-01T00:00:00Z"
    assert format_timestamp(-62_135_596_800_001) == "0000-12-31T23:59:59.999Z"
    assert UtcTimestamps().format(2**63 - 1) == b"+292278994-08-17T07:12:55.807Z"
