"""``pulsar-admin``'s value syntax: relative times (``100m``, ``3h``) and sizes (``10M``, ``1G``).

* Times (``RelativeTimeUtil.parseRelativeTimeInSeconds``): an integer with an optional unit ``s``, ``m``,
  ``h``, ``d``, ``w`` or ``y`` (365 days); no unit means seconds. ``-1`` stays -1 (infinite).
* Sizes (``validateSizeString``): an integer with an optional unit ``k``, ``m``, ``g`` or ``t`` (either case,
  powers of 1024); no unit means bytes. ``-1`` stays -1 (infinite).
* ``set-retention --time 1h --size 1G`` sends ``retentionTimeInMinutes = seconds // 60`` and
  ``retentionSizeInMB = bytes // 1 MiB``, as pulsar-admin does (so a size below 1 MiB becomes 0).
"""

from __future__ import annotations

import re

TIME_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_NUMBER = re.compile(r"-?\d{1,18}")


class UnitError(ValueError):
    pass


def parse_time_s(text: str) -> int:
    """Seconds in ``text`` (``-1`` = infinite)."""
    value = text.strip()
    if not value:
        raise UnitError("empty time value")
    unit = value[-1].lower()
    factor = 1
    if not unit.isdigit():
        if unit not in TIME_UNITS_S:
            raise UnitError(f"invalid time unit {value[-1]!r} in {text!r} (use s, m, h, d, w or y)")
        factor = TIME_UNITS_S[unit]
        value = value[:-1]
    if not _NUMBER.fullmatch(value):
        raise UnitError(f"invalid time value {text!r}")
    number = int(value)
    if number < 0:
        if number != -1:
            raise UnitError(f"invalid time value {text!r}: only -1 may be negative")
        return -1
    return number * factor


def parse_size_bytes(text: str) -> int:
    """Bytes in ``text`` (``-1`` = infinite)."""
    value = text.strip()
    if not value:
        raise UnitError("empty size value")
    unit = value[-1].lower()
    factor = 1
    if not unit.isdigit():
        if unit not in SIZE_UNITS:
            raise UnitError(f"invalid size unit {value[-1]!r} in {text!r} (use k, m, g or t)")
        factor = SIZE_UNITS[unit]
        value = value[:-1]
    if not _NUMBER.fullmatch(value):
        raise UnitError(f"invalid size value {text!r}")
    number = int(value)
    if number < 0:
        if number != -1:
            raise UnitError(f"invalid size value {text!r}: only -1 may be negative")
        return -1
    return number * factor


def retention_body(time: str, size: str) -> dict[str, int]:
    seconds = parse_time_s(time)
    size_bytes = parse_size_bytes(size)
    return {
        "retentionTimeInMinutes": -1 if seconds == -1 else seconds // 60,
        "retentionSizeInMB": -1 if size_bytes == -1 else size_bytes // (1024 * 1024),
    }
