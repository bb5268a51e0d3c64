"""Frame layer of the bookie wire protocol: length-prefixed frames, decoded without I/O.

Theory of operation. BookKeeper frames every message as ``[int32 frameLength][frame]`` and its Netty
pipeline (``LengthFieldBasedFrameDecoder(nettyMaxFrameSizeBytes, 0, 4, 0, 4)``) refuses frames longer than
``nettyMaxFrameSizeBytes`` (5 MiB). We keep that framing and the v2 header word, and add a request id to every
frame (v2 has none; v3 carries ``txnId`` inside protobuf) so that responses can come back in any order::

    [int32 frameLength][uint32 version<<24 | opCode<<16 | flags][int64 requestId][body ...]

``frameLength`` counts the bytes after itself (12 + len(body)). ``frame_bytes_max`` bounds the *whole* frame,
prefix included, as Netty counts it.

:class:`FrameDecoder` turns a byte stream into frames. It keeps the unread bytes in one buffer with a read
offset (no per-frame buffer shifting: O(total bytes)); when the buffer was fully consumed the next chunk is
adopted as is, without a copy; a small partial frame is joined with the next chunk; a large frame arriving
in pieces grows a bytearray. Every decision is taken from the length prefix alone:

* a negative length cannot be skipped over: the stream is lost (:class:`FramingError`, terminal);
* a length too small to hold the 12-byte header is skipped (:class:`ShortFrame`);
* a frame larger than ``frame_bytes_max`` is reported as soon as its 12-byte header has arrived
  (:class:`OversizedFrame`, with the request id so that it can be answered), and its body is dropped as it
  arrives: at most one received chunk of it is ever held;
* any other frame is returned as ``(header_word, request_id, start, end)`` - the body is ``buffer[start:end]``
  until the next :meth:`FrameDecoder.receive_data`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_VERSION = 3
FRAME_BYTES_MAX_DEFAULT = 5 * 1024 * 1024
"""BookKeeper's ``nettyMaxFrameSizeBytes`` default."""

LENGTH = struct.Struct(">i")
HEADER = struct.Struct(">Iq")  # header word, request id
PREFIX_BYTES = LENGTH.size  # 4
HEADER_BYTES = HEADER.size  # 12
FRAME_OVERHEAD_BYTES = PREFIX_BYTES + HEADER_BYTES  # 16

OP_ERROR = 0x7F
"""Opcode of the error response to a frame that could not be decoded into a request."""

COMPACT_BYTES = 64 * 1024
"""Consumed bytes at the head of a growing buffer are discarded once they exceed this (or half of it)."""
CONCAT_BYTES_MAX = 64 * 1024
"""Unread bytes up to this size are joined with the next chunk into a new immutable buffer; more (a large
frame arriving in pieces) go to a growing bytearray instead, so no byte is copied more than a few times."""


def header_word(op: int, flags: int = 0, version: int = PROTOCOL_VERSION) -> int:
    return (version << 24) | (op << 16) | flags


def split_header_word(word: int) -> tuple[int, int, int]:
    """(version, opcode, flags) of a header word."""
    return word >> 24, (word >> 16) & 0xFF, word & 0xFFFF


@dataclass(frozen=True, slots=True)
class OversizedFrame:
    """A frame longer than ``frame_bytes_max``; its bytes are skipped, never buffered."""

    request_id: int
    header_word: int
    frame_bytes: int


@dataclass(frozen=True, slots=True)
class ShortFrame:
    """A frame whose length cannot even hold the header; skipped (request id unknown)."""

    frame_bytes: int


@dataclass(frozen=True, slots=True)
class FramingError:
    """The byte stream cannot be re-synchronised (e.g. a negative length): the connection must end."""

    reason: str


RawFrame = tuple[int, int, int, int]
"""(header_word, request_id, body_start, body_end) into :attr:`FrameDecoder.buffer`."""


class FrameDecoder:
    __slots__ = ("_buf", "_error", "_pos", "_skip", "bytes_skipped", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        if frame_bytes_max < FRAME_OVERHEAD_BYTES:
            raise ValueError(f"frame_bytes_max={frame_bytes_max} cannot hold a frame header")
        self.frame_bytes_max = frame_bytes_max
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._skip = 0  # bytes of an oversized frame still to drop as they arrive
        self._error: FramingError | None = None
        self.bytes_skipped = 0

    @property
    def buffer(self) -> bytes | bytearray:
        return self._buf

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames (what the decoder holds in memory)."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            return
        if self._skip:
            n = len(data)
            if n <= self._skip:
                self._skip -= n
                self.bytes_skipped += n
                return
            data = memoryview(data)[self._skip :]
            self.bytes_skipped += self._skip
            self._skip = 0
        buf = self._buf
        pos = self._pos
        leftover = len(buf) - pos
        if leftover <= 0:
            # Everything was consumed: adopt the chunk (bytes are immutable, so no copy is needed).
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        if leftover <= CONCAT_BYTES_MAX:
            # A partial frame at the end of the last chunk: prepend it, keeping an immutable buffer that
            # frames are sliced from with one copy. Bounded cost: the leftover is small.
            with memoryview(buf) as view:
                self._buf = b"".join((view[pos:], data))
            self._pos = 0
            return
        # A large frame arriving over many chunks: grow a bytearray (amortised O(bytes)).
        if type(buf) is bytes:
            with memoryview(buf) as view:
                grown = bytearray(view[pos:])
            grown += data
            self._buf = grown
            self._pos = 0
            return
        assert isinstance(buf, bytearray)
        if pos > COMPACT_BYTES or pos > len(buf) // 2:
            del buf[:pos]
            self._pos = 0
        buf += data

    def pending_request_id(self) -> int | None:
        """The request id of the incomplete frame at the head of the buffer, once its header has arrived."""
        if self._error is not None or len(self._buf) - self._pos < FRAME_OVERHEAD_BYTES:
            return None
        return int(HEADER.unpack_from(self._buf, self._pos + PREFIX_BYTES)[1])

    def next_frame(self) -> RawFrame | OversizedFrame | ShortFrame | FramingError | None:
        """The next complete frame, a framing event, or None when more bytes are needed."""
        if self._error is not None:
            return self._error
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < PREFIX_BYTES:
            return None
        (length,) = LENGTH.unpack_from(buf, pos)
        if length < 0:
            self._error = FramingError(f"negative frame length {length}")
            self._buf = b""
            self._pos = 0
            return self._error
        total = length + PREFIX_BYTES
        if total > self.frame_bytes_max:
            return self._oversized(avail, total)
        if avail < total:
            return None
        if length < HEADER_BYTES:
            self._pos = pos + total
            return ShortFrame(total)
        word, request_id = HEADER.unpack_from(buf, pos + PREFIX_BYTES)
        self._pos = pos + total
        return word, request_id, pos + FRAME_OVERHEAD_BYTES, pos + total

    def _oversized(self, avail: int, total: int) -> OversizedFrame | None:
        if avail < FRAME_OVERHEAD_BYTES:
            return None  # wait for the header (12 bytes) to learn the request id
        word, request_id = HEADER.unpack_from(self._buf, self._pos + PREFIX_BYTES)
        have = min(avail, total)
        self._pos += have
        self.bytes_skipped += have
        self._skip = total - have
        if self._pos >= len(self._buf):
            self._buf = b""
            self._pos = 0
        return OversizedFrame(request_id, word, total)

    def body(self, start: int, end: int) -> bytes:
        """A copy of ``buffer[start:end]`` (one copy, whatever the buffer type)."""
        buf = self._buf
        if type(buf) is bytes:
            return buf[start:end]
        with memoryview(buf) as view:
            return bytes(view[start:end])
