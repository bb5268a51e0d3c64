"""BookKeeper's bookie status codes and request flags (``BookieProtocol`` v2 numbering).

The wire carries the v2 codes; v3 used a different numbering for the same meanings (ENOENTRY = 403 ...),
which :data:`V3_CODES` records for log messages and operators who know those numbers.
"""

from __future__ import annotations

import enum


class BookieStatus(enum.IntEnum):
    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107

    @classmethod
    def from_wire(cls, code: int) -> BookieStatus:
        """Map a code read off the wire; an unknown code is a malformed message (EBADREQ)."""
        try:
            return cls(code)
        except ValueError:
            return cls.EBADREQ


V3_CODES: dict[BookieStatus, int] = {
    BookieStatus.EOK: 0,
    BookieStatus.ENOLEDGER: 402,
    BookieStatus.ENOENTRY: 403,
    BookieStatus.EBADREQ: 404,
    BookieStatus.EIO: 501,
    BookieStatus.EUA: 502,
    BookieStatus.EBADVERSION: 503,
    BookieStatus.EFENCED: 504,
    BookieStatus.EREADONLY: 505,
    BookieStatus.ETOOMANYREQUESTS: 506,
    BookieStatus.EUNKNOWNLEDGERSTATE: 507,
}


class Flag(enum.IntFlag):
    NONE = 0
    DO_FENCING = 0x1
    RECOVERY_ADD = 0x2
    HIGH_PRIORITY = 0x4


class OpCode(enum.IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2
    AUTH = 3
    READ_LAC = 4
    WRITE_LAC = 5
    GET_BOOKIE_INFO = 6


ENTRY_ID_LAST = -1
"""READ_ENTRY with this entry id asks for the last entry the bookie stores for the ledger."""

MASTER_KEY_BYTES = 20
