"""The frames of Pulsar's binary protocol, sans-IO: a decoder fed bytes in any chunks, and the encoders.

Every frame is ``[total size u32][command size u32][BaseCommand]``, all sizes unsigned big-endian and
``total size`` counting everything after itself. SEND (client to broker) and MESSAGE (broker to client)
carry a payload section after the command::

    [magic 0x0e01 u16][CRC32C u32][metadata size u32][MessageMetadata][payload]

The checksum is CRC-32C (Castagnoli) of everything after it (metadata size, metadata, payload). A section
without the magic is accepted unchecked, as Pulsar does; one with it and a wrong checksum is reported
(:attr:`PayloadSection.checksum_ok` False) so the adapter answers ``ChecksumError``. A broker-entry-metadata
block (magic ``0x0e02``) in front is skipped.

Bounds: a frame larger than ``frame_bytes_max`` (Pulsar: ``maxMessageSize`` + 10 KiB of padding) or whose
sizes contradict each other ends the stream (:class:`FrameError`): the length prefix cannot be trusted any
more, so the connection must close. The decoder never holds more than one frame plus one received chunk.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

MAGIC_CHECKSUM = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
MAX_MESSAGE_SIZE_DEFAULT = 5 * 1024 * 1024
"""Pulsar's ``maxMessageSize`` default (5 MiB): the default of the setting ``max_message_size``."""
CHUNKED_MESSAGE_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
"""The largest whole message a chunk may claim to belong to (``total_chunk_msg_size``), in bytes: the
default of the setting ``chunked_message_bytes_max``."""
FRAME_PADDING = 10 * 1024
"""What a frame may hold beyond a message of ``maxMessageSize`` (command, metadata)."""
FRAME_BYTES_MAX_DEFAULT = MAX_MESSAGE_SIZE_DEFAULT + FRAME_PADDING
COMMAND_BYTES_MAX = 64 * 1024 + 1024 * 1024
"""A command alone (without payload) is small - but PRODUCER, SUBSCRIBE and GET_OR_CREATE_SCHEMA may carry a
schema, whose data the registry takes up to the metadata store's value size (``schema_data_bytes_max``, at
most 1 MiB - 8 KiB): a larger command size is refused and ends the connection."""

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEAD = struct.Struct(">II")


class FrameError(ValueError):
    """The byte stream is not a valid frame sequence (the message says why); the connection must end."""


class PayloadError(ValueError):
    """A payload section that cannot be read (its frame was whole: only that command fails)."""


@dataclass(frozen=True, slots=True)
class PayloadSection:
    """The payload section of a SEND or MESSAGE frame."""

    metadata: bytes
    payload: bytes
    has_checksum: bool
    checksum_ok: bool


@dataclass(frozen=True, slots=True)
class Frame:
    """One whole frame: its command's bytes and the raw bytes after the command (empty when none)."""

    command: bytes
    rest: bytes

    def payload_section(self) -> PayloadSection:
        return parse_payload_section(self.rest)


def parse_payload_section(data: bytes) -> PayloadSection:
    view = memoryview(data)
    pos = 0
    if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        if len(view) < 6:
            raise PayloadError("truncated broker entry metadata")
        (size,) = _U32.unpack_from(view, 2)
        if size > len(view) - 6:
            raise PayloadError(f"broker entry metadata of {size} bytes, {len(view) - 6} remain")
        pos = 6 + size
    has_checksum = False
    checksum_ok = True
    if len(view) - pos >= 2 and _U16.unpack_from(view, pos)[0] == MAGIC_CHECKSUM:
        if len(view) - pos < 6:
            raise PayloadError("truncated checksum")
        (expected,) = _U32.unpack_from(view, pos + 2)
        pos += 6
        has_checksum = True
        checksum_ok = crc32c.crc32c(view[pos:]) == expected
    if len(view) - pos < 4:
        raise PayloadError("payload section without metadata size")
    (size,) = _U32.unpack_from(view, pos)
    pos += 4
    if size > len(view) - pos:
        raise PayloadError(f"metadata of {size} bytes, {len(view) - pos} remain")
    return PayloadSection(bytes(view[pos : pos + size]), bytes(view[pos + size :]), has_checksum, checksum_ok)


def encode_frame(command: bytes, payload_section: bytes = b"") -> bytes:
    return _HEAD.pack(4 + len(command) + len(payload_section), len(command)) + command + payload_section


def encode_payload_section(metadata: bytes, payload: bytes) -> bytes:
    """``[magic][CRC32C][metadata size][metadata][payload]`` (always with the checksum: some clients treat
    a section without it as corrupt)."""
    body = _U32.pack(len(metadata)) + metadata + payload
    return _U16.pack(MAGIC_CHECKSUM) + _U32.pack(crc32c.crc32c(body)) + body


class FrameDecoder:
    """Frames from a byte stream received in arbitrary chunks (see the module docstring)."""

    __slots__ = ("_buf", "_failed", "_pos", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        if frame_bytes_max < 8:
            raise ValueError("frame_bytes_max cannot hold a frame header")
        self.frame_bytes_max = frame_bytes_max
        self._buf = bytearray()
        self._pos = 0
        """Where the unread bytes start: frames are sliced off by moving it, and the consumed head is
        dropped when new bytes arrive (so many small frames in one chunk cost O(bytes))."""
        self._failed: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._failed is None:
            if self._pos:
                del self._buf[: self._pos]
                self._pos = 0
            self._buf += data

    def take_unread(self) -> bytes:
        """The bytes received after the last whole frame taken, handed over (a relayed connection's)."""
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        return rest

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None until more bytes arrive; :class:`FrameError` (for good) when the
        stream is invalid - as soon as the 8 header bytes show it."""
        if self._failed is not None:
            raise self._failed
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total + 4 > self.frame_bytes_max:
            return self._fail(f"frame of {total + 4} bytes, more than {self.frame_bytes_max}")
        if total < 4:
            return self._fail(f"frame size {total} cannot hold a command size")
        if avail < 8:
            return None
        (command_size,) = _U32.unpack_from(buf, pos + 4)
        if command_size > total - 4:
            return self._fail(f"command of {command_size} bytes in a frame of {total}")
        if command_size == 0 or command_size > COMMAND_BYTES_MAX:
            return self._fail(f"command size {command_size} out of range")
        if avail < total + 4:
            return None
        start = pos + 8 + command_size
        with memoryview(buf) as view:
            frame = Frame(bytes(view[pos + 8 : start]), bytes(view[start : pos + 4 + total]))
        self._pos = pos + 4 + total
        return frame

    def _fail(self, reason: str) -> Frame | None:
        self._failed = FrameError(reason)
        self._buf = bytearray()
        self._pos = 0
        raise self._failed
