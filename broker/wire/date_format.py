"""Pulsar's ``DateFormatter``: ISO-8601 with offset, as ``DateTimeFormatter.ISO_OFFSET_DATE_TIME``.

The WebSocket API shows ``publishTime``/``eventTime`` as strings made by ``DateFormatter.format(ms)`` and
parses a producer's ``eventTime`` with ``DateFormatter.parse``. Java's formatter prints the fraction of a
second with as few digits as needed (so millisecond timestamps give 0 to 3 digits: ``.967``, ``.9``, none at
all on a whole second), and the offset as ``Z`` for UTC or ``+HH:MM``. Pulsar uses the JVM's default zone; a
server has one too, so the zone is a parameter here with UTC as the default — the instant is what matters.

Parsing accepts what ``ISO_OFFSET_DATE_TIME`` accepts: ``YYYY-MM-DDTHH:MM[:SS[.fraction(1-9 digits)]]``
followed by ``Z`` or ``+HH:MM[:SS]``, case-insensitively; anything else (no offset, a date alone, a space
for ``T``) is an error, which the producer handler turns into ``send-error:7``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PATTERN = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|[+-]\d{2}:\d{2}(?::\d{2})?)",
    re.ASCII | re.IGNORECASE,
)


class DateParseError(ValueError):
    """The text is not an ISO-8601 date-time with offset (Java: ``DateTimeParseException``)."""


def format_timestamp(ms: int, tz: tzinfo = UTC) -> str:
    """Epoch milliseconds -> ``2021-10-29T16:01:38.967-07:00`` (``Z`` in UTC). Any 64-bit value: an instant
    outside Python's years 1-9999 (a client's event time is any ``long``) is written as Java writes it
    (:func:`_format_far`), never refused."""
    try:
        moment = (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz)
    except (OverflowError, ValueError):
        return _format_far(ms, tz)
    text = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:{moment.minute:02d}:"
    text += f"{moment.second:02d}"
    millis = moment.microsecond // 1000
    if millis:
        text += "." + f"{millis:03d}".rstrip("0")
    return text + _format_offset(moment.utcoffset() or timedelta(0))


def _format_far(ms: int, tz: tzinfo) -> str:
    """:func:`format_timestamp` of an instant ``datetime`` cannot hold, in the proleptic Gregorian calendar
    as ``java.time`` counts it: a year above 9999 gets a ``+``, one below 0 a ``-`` (at least 4 digits, as
    ``ISO_LOCAL_DATE``'s ``EXCEEDS_PAD``), year 0 is 1 BC. The zone's offset is its fixed one (UTC when it
    has none: no rules reach that far)."""
    offset = tz.utcoffset(None) or timedelta(0)
    local_ms = ms + int(offset.total_seconds()) * 1000
    days, day_ms = divmod(local_ms, 86_400_000)
    # days since 1970-01-01 -> (year, month, day) (the civil-from-days algorithm, for any integer)
    era, day_of_era = divmod(days + 719_468, 146_097)
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    if year > 9999:
        year_text = f"+{year}"
    elif year < 0:
        year_text = f"-{-year:04d}"
    else:
        year_text = f"{year:04d}"
    seconds, millis = divmod(day_ms, 1000)
    hour, rest = divmod(seconds, 3600)
    minute, second = divmod(rest, 60)
    text = f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    return text + _FRACTIONS[millis].decode() + _format_offset(offset)


_FRACTIONS = [b"." + f"{millis:03d}".rstrip("0").encode() if millis else b"" for millis in range(1000)]
"""A millisecond's fraction of a second as Java prints it: ``.967``, ``.9``, nothing for 0."""


class UtcTimestamps:
    """:func:`format_timestamp` in UTC as ASCII bytes, for a stream of timestamps that mostly share their
    second (a consumer's ``publishTime``): the date and time of the second are formatted once, the fraction
    looked up. The same text as ``format_timestamp(ms).encode()``; one per session (not shared by tasks)."""

    __slots__ = ("_head", "_second")

    def __init__(self) -> None:
        self._second: int | None = None
        self._head = b""

    def format(self, ms: int) -> bytes:
        second, millis = divmod(ms, 1000)
        if second != self._second:
            self._second = second
            self._head = format_timestamp(second * 1000).encode("ascii")[:-1]  # without its "Z"
        return self._head + _FRACTIONS[millis] + b"Z"


def _format_offset(offset: timedelta) -> str:
    total = int(offset.total_seconds())
    if total == 0:
        return "Z"
    sign = "+" if total > 0 else "-"
    total = abs(total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


def parse_timestamp(text: str) -> int:
    """ISO-8601 with offset -> epoch milliseconds (sub-millisecond digits dropped, like ``toEpochMilli``)."""
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise DateParseError(f"Text '{text}' could not be parsed")
    year, month, day, hour, minute = (int(match.group(i)) for i in range(1, 6))
    second = int(match.group(6) or 0)
    fraction = (match.group(7) or "").ljust(9, "0")
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=_parse_offset(match.group(8)))
    except ValueError as exc:
        raise DateParseError(f"Text '{text}' could not be parsed: {exc}") from None
    delta = moment - _EPOCH
    whole_ms = (delta.days * 86_400 + delta.seconds) * 1000
    return whole_ms + int(fraction) // 1_000_000


def _parse_offset(text: str) -> tzinfo:
    if text.upper() == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    fields = [int(part) for part in text[1:].split(":")]
    hours, minutes = fields[0], fields[1]
    seconds = fields[2] if len(fields) > 2 else 0
    if hours > 18 or minutes > 59 or seconds > 59:
        raise ValueError(f"invalid offset {text}")
    offset = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if offset > timedelta(hours=18):
        raise ValueError(f"invalid offset {text}")
    return timezone(sign * offset)
