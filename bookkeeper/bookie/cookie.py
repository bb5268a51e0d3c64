"""A bookie's cookie: the record of who a bookie is and which directories hold its data (BookKeeper's
``Cookie``).

A bookie that has acknowledged an entry is trusted to keep it: ledger recovery takes its "no such entry" as
evidence that the entry was never written. A bookie that comes back under the same id on an empty or
different volume would therefore make ledgers look shorter than what writers were told was stored. The
cookie guards against that. At its first start a bookie writes the same cookie into each of its directories
(a ``VERSION`` file) and into the metadata store (``/ledgers/cookies/<bookieId>``); at every later start the
three must agree with each other and with the configuration (:mod:`.identity` decides).

What a cookie holds, and what is compared (BookKeeper's ``Cookie.verify``): the bookie id (the advertised
``host:port``), the journal directories, the ledger directories and the cluster's instance id. A difference in
any of them means the bookie is not the one that wrote the cookie: a changed address, a volume mounted at a
different path or swapped with another bookie's, or a volume from another cluster. ``format_version`` is the
layout of the cookie itself; a newer one than this code knows is refused rather than misread.

Encoding: one JSON object, keys sorted (``formatVersion``, ``bookieId``, ``instanceId``, ``journalDirs``,
``ledgerDirs``), directories as absolute paths. This module does no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

COOKIE_FILE_NAME = "VERSION"
"""The cookie's file in each directory, as BookKeeper's ``current/VERSION``."""

COOKIE_FORMAT_VERSION = 1
COOKIE_BYTES_MAX = 64 * 1024
"""A cookie file or node larger than this is not a cookie (it is never read whole)."""


class CookieFormatError(ValueError):
    """Bytes that are not a cookie this code can read."""


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str | None
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    format_version: int = COOKIE_FORMAT_VERSION

    def __post_init__(self) -> None:
        if not self.bookie_id:
            raise CookieFormatError("a cookie needs a bookie id")
        if not 1 <= self.format_version <= COOKIE_FORMAT_VERSION:
            raise CookieFormatError(
                f"cookie format version {self.format_version} is not one this bookie knows "
                f"(1..{COOKIE_FORMAT_VERSION}): written by a newer Magnetar?"
            )

    def to_bytes(self) -> bytes:
        document = {
            "formatVersion": self.format_version,
            "bookieId": self.bookie_id,
            "instanceId": self.instance_id,
            "journalDirs": list(self.journal_dirs),
            "ledgerDirs": list(self.ledger_dirs),
        }
        return (json.dumps(document, sort_keys=True, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Cookie:
        if len(data) > COOKIE_BYTES_MAX:
            raise CookieFormatError(f"{len(data)} bytes: larger than any cookie ({COOKIE_BYTES_MAX})")
        try:
            document = json.loads(data)
            instance_id = document["instanceId"]
            return cls(
                bookie_id=_text(document["bookieId"]),
                instance_id=None if instance_id is None else _text(instance_id),
                journal_dirs=tuple(_text(d) for d in document["journalDirs"]),
                ledger_dirs=tuple(_text(d) for d in document["ledgerDirs"]),
                format_version=int(document["formatVersion"]),
            )
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            if isinstance(exc, CookieFormatError):
                raise
            raise CookieFormatError(f"not a cookie: {data[:120]!r} ({exc})") from exc

    def differences(self, found: Cookie) -> list[str]:
        """What differs between this (the configuration's) cookie and ``found``, one phrase each."""
        out = []
        for label, mine, theirs in (
            ("bookie id", self.bookie_id, found.bookie_id),
            ("journal directories", self.journal_dirs, found.journal_dirs),
            ("ledger directories", self.ledger_dirs, found.ledger_dirs),
            ("cluster instance id", self.instance_id, found.instance_id),
        ):
            if mine != theirs:
                out.append(f"{label} {_show(theirs)} in the cookie, {_show(mine)} now")
        return out


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise CookieFormatError(f"expected a string, found {value!r}")
    return value


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return "none" if value is None else repr(value)
