"""Entry packaging and digests, as BookKeeper's ``DigestManager``.

A packaged entry is what the writer sends and what bookies store verbatim::

    [ledgerId:int64][entryId:int64][lastAddConfirmed:int64][length:int64]  32-byte header
    [digest]                                      CRC32C 4 | CRC32 8 | HMAC 20 | DUMMY 0 bytes
    [payload]

The digest covers the header and the payload; it is computed part by part over a payload given in parts
(:meth:`Digester.package_head`), so the writer sends header, digest and payload parts without joining them.
``lastAddConfirmed`` is the writer's LAC when it packaged the entry (the piggybacked LAC); ``length`` is the
ledger's cumulative length including this entry. Bookies do not interpret the digest; readers verify it and
reject a mismatch. The master key that bookies compare on adds and fencing is ``SHA1("ledger" || password)``;
the HMAC key is ``SHA1("mac" || password)``.
An explicit LAC body is ``[ledgerId][lac]`` followed by the same kind of digest.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

HEADER = struct.Struct(">qqqq")
HEADER_BYTES = HEADER.size  # 32
LAC_HEADER = struct.Struct(">qq")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


Payload = bytes | tuple[bytes | memoryview, ...]
"""An entry's payload as its writer hands it over: one buffer, or its parts in order (never joined by the
client: see :meth:`Digester.package_head`)."""


def payload_size(parts: Sequence[bytes | memoryview]) -> int:
    size = 0
    for part in parts:
        size += len(part)
    return size


class DigestType(enum.IntEnum):
    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


class DigestError(ValueError):
    """The entry's digest does not match, or the entry is not the one asked for."""


def master_key(password: bytes) -> bytes:
    return hashlib.sha1(b"ledger" + password).digest()


def digest_bytes(digest_type: DigestType) -> int:
    return {DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}[digest_type]


@dataclass(frozen=True, slots=True)
class Digester:
    """Computes and checks one ledger's digests (the password matters only for HMAC)."""

    digest_type: DigestType
    password: bytes = b""

    def compute(self, header: bytes, payload: bytes | memoryview) -> bytes:
        return self.compute_parts(header, (payload,))

    def compute_parts(self, header: bytes, parts: Sequence[bytes | memoryview]) -> bytes:
        """The digest of ``header`` followed by ``parts``, computed part by part (the parts are never joined:
        a CRC or HMAC over consecutive parts equals the one over their concatenation)."""
        kind = self.digest_type
        if kind is DigestType.CRC32C:
            crc = crc32c.crc32c(header)
            for part in parts:
                crc = crc32c.crc32c(part, crc)
            return _U32.pack(crc)
        if kind is DigestType.DUMMY:
            return b""
        if kind is DigestType.CRC32:
            crc = zlib.crc32(header)
            for part in parts:
                crc = zlib.crc32(part, crc)
            return _U64.pack(crc)
        mac = hmac.new(hashlib.sha1(b"mac" + self.password).digest(), header, hashlib.sha1)
        for part in parts:
            mac.update(part)
        return mac.digest()

    @property
    def size(self) -> int:
        return digest_bytes(self.digest_type)

    def package(self, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
        """The packaged entry as one buffer (header, digest, payload joined: a copy of the payload)."""
        return b"".join((self.package_head(ledger_id, entry_id, lac, length, (payload,)), payload))

    def package_head(
        self, ledger_id: int, entry_id: int, lac: int, length: int, parts: Sequence[bytes | memoryview]
    ) -> bytes:
        """The header and digest of the entry whose payload is ``parts`` in order: the packaged entry is this
        head followed by the parts, sent as they are (the writer's path: no copy of the payload)."""
        header = HEADER.pack(ledger_id, entry_id, lac, length)
        return header + self.compute_parts(header, parts)

    def unpack(self, data: bytes, ledger_id: int, entry_id: int | None = None) -> PackagedEntry:
        """Verify ``data`` and return its fields; ``entry_id=None`` accepts any entry of the ledger."""
        size = self.size
        if len(data) < HEADER_BYTES + size:
            raise DigestError(f"entry of {len(data)} bytes is shorter than its header")
        header = data[:HEADER_BYTES]
        got_ledger, got_entry, lac, length = HEADER.unpack(header)
        payload = memoryview(data)[HEADER_BYTES + size :]
        if not hmac.compare_digest(self.compute(header, payload), data[HEADER_BYTES : HEADER_BYTES + size]):
            raise DigestError(f"digest mismatch for ledger {got_ledger} entry {got_entry}")
        if got_ledger != ledger_id or (entry_id is not None and got_entry != entry_id):
            raise DigestError(f"asked for {ledger_id}:{entry_id}, the entry says {got_ledger}:{got_entry}")
        return PackagedEntry(got_ledger, got_entry, lac, length, bytes(payload))

    def package_lac(self, ledger_id: int, lac: int) -> bytes:
        header = LAC_HEADER.pack(ledger_id, lac)
        return header + self.compute(header, b"")

    def unpack_lac(self, data: bytes, ledger_id: int) -> int:
        if len(data) != LAC_HEADER.size + self.size:
            raise DigestError(f"explicit LAC body of {len(data)} bytes has the wrong size")
        header = data[: LAC_HEADER.size]
        if not hmac.compare_digest(self.compute(header, b""), data[LAC_HEADER.size :]):
            raise DigestError(f"explicit LAC digest mismatch for ledger {ledger_id}")
        got_ledger, lac = LAC_HEADER.unpack(header)
        if got_ledger != ledger_id:
            raise DigestError(f"explicit LAC for ledger {got_ledger}, expected {ledger_id}")
        return int(lac)


@dataclass(frozen=True, slots=True)
class PackagedEntry:
    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: bytes


def peek_ids(data: bytes) -> tuple[int, int]:
    """(ledgerId, entryId) of a packaged entry without verifying it (bookies store entries unverified)."""
    if len(data) < 16:
        raise DigestError(f"entry of {len(data)} bytes is shorter than its ids")
    ledger_id, entry_id = struct.unpack_from(">qq", data)
    return int(ledger_id), int(entry_id)


def peek_lac(data: bytes) -> int:
    """The piggybacked LAC of a packaged entry, unverified."""
    if len(data) < 24:
        raise DigestError(f"entry of {len(data)} bytes is shorter than its header")
    return int(struct.unpack_from(">q", data, 16)[0])
