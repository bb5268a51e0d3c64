"""WebSocket framing (RFC 6455 §5), sans-IO: one decoder for either side, and the frame encoders.

Theory of operation. After the opening handshake (h11 and wsproto's handshake helpers) every byte on the
socket is a frame. :meth:`FrameDecoder.feed` takes whatever the socket returned and gives back, in order,
every event the bytes complete: ``str`` for a text message, ``bytes`` for a binary one (fragments
reassembled), and :class:`Ping`, :class:`Pong` and :class:`Close` for control frames (which may arrive
between the fragments of a message). All frames of a chunk are handled in one call, with the per-frame work
kept to a header parse, a slice and (server side) the unmasking: a few microseconds per small frame, where
wsproto's generic state machine spent ~15 µs and an event object per frame. The common frame - a whole text
or binary message under 64 KiB, masked as expected, in the limits and outside a fragmented message - is
checked and decoded inside the chunk's loop; every other frame takes the general path with every check
(:meth:`FrameDecoder._frame`).

The decoder checks what RFC 6455 requires of a received frame, as wsproto did before it: reserved bits clear
(no extension is negotiated), a known opcode, control frames unfragmented and at most 125 bytes, the payload
length in its shortest encoding with the 64-bit form's top bit clear, frames from a client masked and frames
from a server not, a continuation frame only inside a fragmented message and no new data frame inside one,
text messages valid UTF-8 (1007), and a Close payload that is empty or a valid code with a UTF-8 reason. A
message larger than ``message_bytes_max`` is refused from the frame headers, before its payload is buffered:
a :class:`ProtocolViolation` with 1009 is reported and every later data frame is skipped unbuffered, while
control frames are still decoded (so the peer's answering Close arrives). A message in more than
``message_fragments_max`` frames is refused the same way with 1008 (policy violation): without that bound,
empty continuation frames would cost work without end and tiny ones an object each. Fragments are gathered
in one growing buffer, so a message costs its bytes however it was cut. Any other violation ends decoding:
the events before it are returned, followed by one :class:`ProtocolViolation` with the close code to send.
After a Close frame nothing more is decoded (RFC 6455 §5.5.1: no data frames after Close).

Masking (§5.3) XORs the payload with the 4-byte key repeated. Every byte a client sends is masked, so this is
on the hot path of both sides: ``websockets.speedups.apply_mask`` (a small C function of the ``websockets``
package) does it in 0.5 us for a 12 KB frame; without it (a platform with no wheel) the fallback is one
big-integer XOR through ``int.from_bytes``, 24 us for the same frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

OPCODE_CONTINUATION = 0x0
OPCODE_TEXT = 0x1
OPCODE_BINARY = 0x2
OPCODE_CLOSE = 0x8
OPCODE_PING = 0x9
OPCODE_PONG = 0xA

CONTROL_PAYLOAD_BYTES_MAX = 125
CLOSE_REASON_BYTES_MAX = CONTROL_PAYLOAD_BYTES_MAX - 2
_CONTROL_FRAME_BYTES_MAX = 14 + CONTROL_PAYLOAD_BYTES_MAX
"""The largest control frame with its header (a longest header is 14 bytes with the mask)."""

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005
"""Reported when a Close frame carried no code; never sent."""
CLOSE_ABNORMAL = 1006
"""Never sent: reported when the connection dropped without a Close frame."""
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_TLS_FAILED = 1015
LOCAL_ONLY_CLOSE_CODES = frozenset((CLOSE_NO_STATUS, CLOSE_ABNORMAL, CLOSE_TLS_FAILED))
"""Codes that describe a close locally and must never appear in a Close frame (RFC 6455 §7.4.1)."""
_DEFINED_CLOSE_CODES = frozenset(range(1000, 1016)) - {1004} - LOCAL_ONLY_CLOSE_CODES
"""Codes below 3000 a peer may send: RFC 6455's plus 1012-1014 from the IANA registry."""

_NOT_UTF8 = "text message is not valid UTF-8"
_HEADER_16 = struct.Struct("!BBH")
_HEADER_64 = struct.Struct("!BBQ")
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")


@dataclass(frozen=True, slots=True)
class Ping:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    code: int
    """:data:`CLOSE_NO_STATUS` when the frame carried no code."""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The peer broke the protocol: close with ``code``; nothing after this is decoded."""

    code: int
    reason: str


Event = str | bytes | Ping | Pong | Close | ProtocolViolation


class _Violation(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def mask_python(payload: bytes | bytearray | memoryview, key: bytes) -> bytes:
    """``payload`` XOR the repeated 4-byte ``key`` in pure Python (the fallback of :func:`mask`)."""
    size = len(payload)
    if size == 0:
        return b""
    keys = (key * (size // 4 + 1))[:size]
    value = int.from_bytes(payload, "little") ^ int.from_bytes(keys, "little")
    return value.to_bytes(size, "little")


def _c_mask() -> Callable[[bytes | bytearray | memoryview, bytes], bytes] | None:
    try:
        from websockets.speedups import apply_mask  # noqa: PLC0415 - optional C speedup
    except ImportError:
        return None
    return apply_mask


mask: Callable[[bytes | bytearray | memoryview, bytes], bytes] = _c_mask() or mask_python
"""``payload`` XOR the repeated 4-byte ``key`` (masking and unmasking are the same operation)."""


def frame_header(opcode: int, length: int, *, fin: bool = True, masked: bool = False) -> bytes:
    """The first bytes of a frame up to (not including) the masking key."""
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if masked else 0
    if length < 126:
        return bytes((first, mask_bit | length))
    if length < 65536:
        return _HEADER_16.pack(first, mask_bit | 126, length)
    return _HEADER_64.pack(first, mask_bit | 127, length)


def append_frames(out: bytearray, opcode: int, messages: Sequence[bytes]) -> None:
    """Append each of ``messages`` to ``out`` as one unfragmented, unmasked frame (as a server sends them),
    the headers written in the same pass (a session's outbound queue sends hundreds of small frames at
    once: :func:`frame_header` per frame was a tenth of the write)."""
    first = 0x80 | opcode
    pack16 = _HEADER_16.pack
    for data in messages:
        size = len(data)
        if size < 126:
            out.append(first)
            out.append(size)
        elif size < 65536:
            out += pack16(first, 126, size)
        else:
            out += _HEADER_64.pack(first, 127, size)
        out += data


def encode_frame(
    opcode: int, payload: bytes | bytearray | memoryview, *, fin: bool = True, mask_key: bytes | None = None
) -> bytes:
    """One frame; masked with ``mask_key`` (4 bytes) when given, as a client must send."""
    header = frame_header(opcode, len(payload), fin=fin, masked=mask_key is not None)
    if mask_key is None:
        return header + bytes(payload)
    return header + mask_key + mask(payload, mask_key)


def close_payload(code: int | None, reason: str = "") -> bytes:
    """The payload of a Close frame: empty for no code; a local-only code is sent as 1000 (as wsproto does);
    the reason is cut to fit 125 bytes on a character boundary."""
    if code is None or code == CLOSE_NO_STATUS:
        return b""
    if code in LOCAL_ONLY_CLOSE_CODES:
        code = CLOSE_NORMAL
    encoded = reason.encode("utf-8")
    if len(encoded) > CLOSE_REASON_BYTES_MAX:
        encoded = encoded[:CLOSE_REASON_BYTES_MAX].decode("utf-8", errors="ignore").encode("utf-8")
    return _U16.pack(code) + encoded


def parse_close_payload(payload: bytes) -> Close:
    """A received Close frame's payload; :class:`ProtocolViolation` semantics via the internal exception."""
    if not payload:
        return Close(CLOSE_NO_STATUS)
    if len(payload) == 1:
        raise _Violation(CLOSE_PROTOCOL_ERROR, "Close frame with a 1-byte payload")
    (code,) = _U16.unpack_from(payload)
    if not (code in _DEFINED_CLOSE_CODES or 3000 <= code <= 4999):
        raise _Violation(CLOSE_PROTOCOL_ERROR, f"Close frame with invalid code {code}")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise _Violation(CLOSE_INVALID_PAYLOAD, "Close reason is not valid UTF-8") from None
    return Close(code, reason)


class FrameDecoder:
    """Decodes the frames one peer sends (see the module docstring).

    ``expect_masked``: True on a server (client frames must be masked), False on a client.
    ``message_fragments_max``: frames one message may arrive in (0: no limit, for a client of a trusted
    server)."""

    def __init__(
        self, *, expect_masked: bool, message_bytes_max: int, message_fragments_max: int = 0
    ) -> None:
        self._expect_masked = 0x80 if expect_masked else 0
        self._message_bytes_max = message_bytes_max
        self._message_fragments_max = message_fragments_max or (1 << 62)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._needed = 2
        """Bytes the next frame needs before decoding can progress (its header, then all of it)."""
        self._fragments = bytearray()
        self._fragments_bytes = 0
        self._fragment_count = 0
        self._fragmented_opcode = 0
        """Opcode of the message being reassembled from fragments, 0 when none."""
        self._oversized = False
        """A message over the limit was refused: data frames are skipped from then on."""
        self._skip = 0
        """Bytes of a skipped frame's payload still to arrive."""
        self._done = False

    @property
    def finished(self) -> bool:
        """True after a Close frame or a violation: nothing more will be decoded."""
        return self._done

    @property
    def buffered_bytes(self) -> int:
        return self._pending_bytes

    @property
    def unfinished_bytes(self) -> int:
        """Bytes held for what is not complete yet: a message's fragments and a frame being read."""
        return self._pending_bytes + self._fragments_bytes

    def abandon(self) -> None:
        """Drop the message being reassembled and the data frame being read, and skip every later data
        frame, as after a refused message (the session is closing); control frames - the peer's Close - are
        still decoded. A frame whose header is not complete yet (a few bytes) is kept to stay in step."""
        self._oversized = True
        self._fragments = bytearray()
        self._fragments_bytes = 0
        self._fragment_count = 0
        self._fragmented_opcode = 0
        if self._pending_bytes and self._needed > _CONTROL_FRAME_BYTES_MAX:  # a data frame, header read
            self._skip = self._needed - self._pending_bytes
            self._pending = []
            self._pending_bytes = 0

    def feed(self, data: bytes) -> list[Event]:
        """Decode what ``data`` completes (together with what earlier calls left unfinished)."""
        if self._done or not data:
            return []
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return []
            data = data[self._skip :]
            self._skip = 0
        if self._pending:
            self._pending.append(data)
            self._pending_bytes += len(data)
            if self._pending_bytes < self._needed:
                return []
            data = b"".join(self._pending)
            self._pending = []
            self._pending_bytes = 0
        events: list[Event] = []
        try:
            used = self._decode(data, events)
        except _Violation as exc:
            events.append(ProtocolViolation(exc.code, exc.reason))
            self._done = True
            return events
        if used < len(data) and not self._done:
            rest = data[used:]
            self._pending = [rest]
            self._pending_bytes = len(rest)
        return events

    def _decode(self, buf: bytes, events: list[Event]) -> int:
        """Decode every complete frame of ``buf`` into ``events``; returns the bytes consumed.

        The common frame - a whole text or binary message (FIN set, no reserved bit) shorter than 65,536
        bytes, masked as this side expects, its length in the shortest form, within the message limit, and
        neither inside a fragmented message nor after a refused one - is checked and decoded in line: exactly
        the frames :meth:`_frame` would decode the same way with no other effect. Any other frame, or one not
        complete in ``buf``, goes to :meth:`_frame` (every check, fragments, control frames, skipping)."""
        pos = 0
        end = len(buf)
        masked = self._expect_masked
        key_bytes = 4 if masked else 0
        limit = self._message_bytes_max
        append = events.append
        view = memoryview(buf)
        self._needed = 2
        while end - pos >= 2:
            first = buf[pos]
            if (first == 0x81 or first == 0x82) and not (self._fragmented_opcode or self._oversized):  # noqa: PLR1714
                second = buf[pos + 1]
                length = second & 0x7F
                start = pos + 2
                if length == 126 and end - pos >= 4:
                    length = (buf[start] << 8) | buf[start + 1]
                    start += 2
                    shortest = length >= 126
                else:
                    shortest = length < 126
                start += key_bytes
                frame_end = start + length
                if shortest and second & 0x80 == masked and length <= limit and frame_end <= end:
                    payload = (
                        mask(view[start:frame_end], buf[start - 4 : start])
                        if masked
                        else buf[start:frame_end]
                    )
                    if first == 0x81:
                        try:
                            append(payload.decode("utf-8"))
                        except UnicodeDecodeError:
                            raise _Violation(CLOSE_INVALID_PAYLOAD, _NOT_UTF8) from None
                    else:
                        append(payload)
                    pos = frame_end
                    continue
            after = self._frame(buf, view, pos, end, events)
            if after < 0:
                break
            pos = after
            if self._done:
                break
        return pos

    def _frame(self, buf: bytes, view: memoryview, pos: int, end: int, events: list[Event]) -> int:
        """Decode the frame at ``pos`` with every check; the position after it (``end`` when the rest of it
        is to be skipped), or -1 when it is not complete in ``buf`` (``_needed`` then says how much is)."""
        first = buf[pos]
        header = self._header_length(buf, pos, end)
        if header is None:
            return -1
        header_bytes, length = header
        opcode = first & 0x0F
        start = pos + header_bytes
        frame_end = start + length
        if self._drop_data(first, opcode, length, events):
            if frame_end > end:
                self._skip = frame_end - end
                return end
            return frame_end
        if frame_end > end:
            self._needed = frame_end - pos
            return -1
        if self._expect_masked:
            payload = mask(view[start:frame_end], buf[start - 4 : start])
        else:
            payload = buf[start:frame_end]
        if opcode >= OPCODE_CLOSE:
            self._control(opcode, payload, events)
        elif first & 0x80:
            if opcode == OPCODE_TEXT or (
                opcode == OPCODE_CONTINUATION and self._fragmented_opcode == OPCODE_TEXT
            ):
                events.append(self._text(payload))
            else:
                events.append(self._whole(payload))
        else:
            self._fragments += payload
            self._fragments_bytes += length
            self._fragment_count += 1
            if opcode != OPCODE_CONTINUATION:
                self._fragmented_opcode = opcode
        return frame_end

    def _header_length(self, buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
        """(header bytes including the masking key, payload length) of the frame at ``pos``; None when the
        length field is incomplete."""
        second = buf[pos + 1]
        length = second & 0x7F
        header = 2
        if length == 126:
            header = 4
            if end - pos < 4:
                self._needed = 4
                return None
            length = (buf[pos + 2] << 8) | buf[pos + 3]
            if length < 126:
                raise _Violation(CLOSE_PROTOCOL_ERROR, "payload length not minimally encoded")
        elif length == 127:
            header = 10
            if end - pos < 10:
                self._needed = 10
                return None
            (length,) = _U64.unpack_from(buf, pos + 2)
            if length < 65536 or length >> 63:
                raise _Violation(CLOSE_PROTOCOL_ERROR, "invalid 64-bit payload length")
        if second & 0x80 != self._expect_masked:
            reason = "unmasked client frame" if self._expect_masked else "masked server frame"
            raise _Violation(CLOSE_PROTOCOL_ERROR, reason)
        return (header + 4 if self._expect_masked else header), length

    def _drop_data(self, first: int, opcode: int, length: int, events: list[Event]) -> bool:
        """Check a frame header; True when the frame is a data frame to skip unread: the message is too big
        (reported once, with 1009) or an earlier one was. The session is closing then, and skipping keeps
        reading the peer's control frames (its Close) without buffering what it still sends."""
        self._check_header(first, opcode, length)
        if opcode >= OPCODE_CLOSE:
            return False
        if self._oversized:
            return True
        if self._fragments_bytes + length > self._message_bytes_max:
            reason = f"message larger than {self._message_bytes_max} bytes"
            self._refuse_message(CLOSE_MESSAGE_TOO_BIG, reason, events)
            return True
        if self._fragment_count >= self._message_fragments_max:
            reason = f"message in more than {self._message_fragments_max} frames"
            self._refuse_message(CLOSE_POLICY_VIOLATION, reason, events)
            return True
        return False

    def _refuse_message(self, code: int, reason: str, events: list[Event]) -> None:
        """Drop the message being received and skip every later data frame (the session is closing)."""
        self._oversized = True
        self._fragments = bytearray()
        self._fragments_bytes = 0
        self._fragment_count = 0
        self._fragmented_opcode = 0
        events.append(ProtocolViolation(code, reason))

    def _check_header(self, first: int, opcode: int, length: int) -> None:
        if first & 0x70:
            raise _Violation(CLOSE_PROTOCOL_ERROR, "reserved bits set without a negotiated extension")
        if opcode >= OPCODE_CLOSE:
            if opcode > OPCODE_PONG:
                raise _Violation(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
            if not first & 0x80:
                raise _Violation(CLOSE_PROTOCOL_ERROR, "fragmented control frame")
            if length > CONTROL_PAYLOAD_BYTES_MAX:
                raise _Violation(CLOSE_PROTOCOL_ERROR, "control frame payload over 125 bytes")
            return
        if opcode > OPCODE_BINARY:
            raise _Violation(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        if self._oversized:
            return  # skipping data frames: their sequence no longer matters
        if opcode == OPCODE_CONTINUATION:
            if not self._fragmented_opcode:
                raise _Violation(CLOSE_PROTOCOL_ERROR, "continuation frame outside a fragmented message")
        elif self._fragmented_opcode:
            raise _Violation(CLOSE_PROTOCOL_ERROR, "new data frame inside a fragmented message")

    def _whole(self, payload: bytes) -> bytes:
        if not self._fragmented_opcode:
            return payload
        self._fragments += payload
        whole = bytes(self._fragments)
        self._fragments = bytearray()
        self._fragments_bytes = 0
        self._fragment_count = 0
        self._fragmented_opcode = 0
        return whole

    def _text(self, payload: bytes) -> str:
        try:
            return self._whole(payload).decode("utf-8")
        except UnicodeDecodeError:
            raise _Violation(CLOSE_INVALID_PAYLOAD, _NOT_UTF8) from None

    def _control(self, opcode: int, payload: bytes, events: list[Event]) -> None:
        if opcode == OPCODE_PING:
            events.append(Ping(payload))
        elif opcode == OPCODE_PONG:
            events.append(Pong(payload))
        else:
            events.append(parse_close_payload(payload))
            self._done = True
