"""What differs between the PySpark versions the source supports (4.0 and later).

PySpark 4.2 added admission control to Python stream readers: the engine calls
``latestOffset(start, limit)`` with a ``ReadLimit`` (from ``getDefaultReadLimit``), and a reader that also
implements ``SupportsTriggerAvailableNow`` is told the target of an ``availableNow`` run through
``prepareForTriggerAvailableNow``. PySpark 4.0 and 4.1 call ``latestOffset()`` without arguments and have
none of these classes. This module imports them when they exist and otherwise defines stand-ins of the same
shape, so the reader is written once; :data:`READ_LIMITS_SUPPORTED` tells which engine is running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    READ_LIMITS_SUPPORTED: bool
else:
    try:
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadLimit,
            ReadMaxRows,
            SupportsTriggerAvailableNow,
        )

        READ_LIMITS_SUPPORTED = True
    except ImportError:  # PySpark 4.0 / 4.1
        from dataclasses import dataclass

        READ_LIMITS_SUPPORTED = False

        class ReadLimit:
            pass

        @dataclass
        class ReadAllAvailable(ReadLimit):
            pass

        @dataclass
        class ReadMaxRows(ReadLimit):
            max_rows: int

        class SupportsTriggerAvailableNow:
            """Not known to these engines; ``prepareForTriggerAvailableNow`` is never called."""


__all__ = [
    "READ_LIMITS_SUPPORTED",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
]
