"""Sans-IO codec of the bookie protocol: :class:`ClientProtocol` and :class:`ServerProtocol`, h11-style.

Theory of operation. Framing is :mod:`.frames`: ``[int32 frameLength][uint32 version<<24 | opCode<<16 |
flags][int64 requestId][body]``, version 3. Bodies follow BookKeeper's v2 binary protocol
(``BookieProtoEncoding``; docs/upstream.md, BookKeeper §4, whose §2.2 is cited below) and carry the v3-only
operations with the v3 fields. All integers are big-endian and signed unless noted; ``masterKey`` is 20 bytes
(``SHA1("ledger" || password)``).

Requests (client -> bookie):

================  =====  ==============================  =================================================
op                code   flags                           body
================  =====  ==============================  =================================================
ADD_ENTRY         1      RECOVERY_ADD 0x2,               ``masterKey[20]`` + packaged entry; ledgerId and
                         HIGH_PRIORITY 0x4               entryId are the entry's first 16 bytes (§2.2)
READ_ENTRY        2      DO_FENCING 0x1,                 ``[ledgerId:i64][entryId:i64]`` + ``masterKey[20]``
                         HIGH_PRIORITY 0x4               iff DO_FENCING; entryId -1 = last stored entry
READ_LAC          4      none                            ``[ledgerId:i64]``
WRITE_LAC         5      none                            ``[ledgerId:i64][lac:i64][masterKey 20]`` + LAC body
GET_BOOKIE_INFO   6      none                            ``[requested:i64]`` (bitmask: 1 total, 2 free disk)
AUTH              3      none                            ``[nameLength:u16][pluginName: UTF-8][payload]``
                                                         (payload: rest of the frame; for ``token`` the JWT)
================  =====  ==============================  =================================================

Responses (bookie -> client) carry the request's opcode and id, flags 0, and start with ``[status:i32]``
(v2 numbering, :class:`~.status.BookieStatus`):

================  ==================================================================================
ADD_ENTRY         ``[status][ledgerId:i64][entryId:i64]``
READ_ENTRY        ``[status][ledgerId:i64][entryId:i64]`` + packaged entry (empty unless EOK)
READ_LAC          ``[status][ledgerId:i64][lacBodyLength:i32][lacBody]`` + last entry (rest of frame)
WRITE_LAC         ``[status][ledgerId:i64]``
GET_BOOKIE_INFO   ``[status][totalDiskBytes:i64][freeDiskBytes:i64]``
AUTH              ``[status][nameLength:u16][pluginName][payload]`` - EOK, or EUA with the reason as payload
ERROR (0x7F)      ``[status][message: UTF-8, rest of frame]`` - the answer to a frame that could not be
                  decoded into a request (unknown version or opcode, bad flags, short body, field values
                  rejected by the message classes, oversized frame), with the frame's request id, or 0
                  when the frame was too short to hold one
================  ==================================================================================

AUTH is a connection-level exchange, not a ledger request (:class:`~.messages.AuthRequest` is not part of
:data:`~.messages.Request`): a bookie that requires authentication answers every request of a connection
EUA until an AUTH has succeeded on it, and closes the connection after a refused AUTH.

A malformed frame costs only that request: the server protocol yields :class:`BadRequest` (answer it with
:meth:`ServerProtocol.send` of an :class:`~.messages.ErrorResponse`) and decoding goes on with the next frame.
On the client side an undecodable response becomes ``ErrorResponse(request_id, EBADREQ, ...)`` for that
request. Only a :class:`~.frames.FramingError` (negative length) ends a connection.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from magnetar.bookkeeper.protocol.frames import (
    FRAME_BYTES_MAX_DEFAULT,
    OP_ERROR,
    PROTOCOL_VERSION,
    FrameDecoder,
    FramingError,
    OversizedFrame,
    ShortFrame,
)
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    ErrorResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    InvalidMessageError,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from magnetar.bookkeeper.protocol.status import MASTER_KEY_BYTES, BookieStatus, Flag, OpCode

__all__ = [
    "NEED_DATA",
    "BadRequest",
    "ClientProtocol",
    "FrameTooLargeError",
    "FramingError",
    "ServerProtocol",
    "response_for_status",
]

ERROR_MESSAGE_BYTES_MAX = 1024
"""Error-response messages are cut to this many UTF-8 bytes."""

_V = PROTOCOL_VERSION << 24
_ADD = OpCode.ADD_ENTRY << 16
_READ = OpCode.READ_ENTRY << 16
_READ_LAC = OpCode.READ_LAC << 16
_WRITE_LAC = OpCode.WRITE_LAC << 16
_INFO = OpCode.GET_BOOKIE_INFO << 16
_AUTH = OpCode.AUTH << 16
_ERROR = OP_ERROR << 16
_RECOVERY = int(Flag.RECOVERY_ADD)
_HIGH = int(Flag.HIGH_PRIORITY)
_FENCE = int(Flag.DO_FENCING)
_KEY = MASTER_KEY_BYTES

# Encoders: one struct per frame shape (prefix + header + fixed fields).
_ENC_ADD = struct.Struct(f">iIq{_KEY}s")
_ENC_READ = struct.Struct(">iIqqq")
_ENC_READ_FENCE = struct.Struct(f">iIqqq{_KEY}s")
_ENC_LEDGER = struct.Struct(">iIqq")  # READ_LAC request; GET_BOOKIE_INFO request (requested mask)
_ENC_WRITE_LAC = struct.Struct(f">iIqqq{_KEY}s")
_ENC_STATUS_QQ = struct.Struct(">iIqiqq")  # ADD / READ / GET_BOOKIE_INFO responses
_ENC_READ_LAC_RESP = struct.Struct(">iIqiqi")
_ENC_WRITE_LAC_RESP = struct.Struct(">iIqiq")
_ENC_ERROR = struct.Struct(">iIqi")
_ENC_AUTH = struct.Struct(">iIqH")
_ENC_AUTH_RESP = struct.Struct(">iIqiH")

# Decoders: body fields after the 16-byte frame head.
_QQ = struct.Struct(">qq")
_Q = struct.Struct(">q")
_QQK = struct.Struct(f">qq{_KEY}s")
_KQQ = struct.Struct(f">{_KEY}sqq")
_IQQ = struct.Struct(">iqq")
_IQ = struct.Struct(">iq")
_IQI = struct.Struct(">iqi")
_I = struct.Struct(">i")
_H = struct.Struct(">H")
_IH = struct.Struct(">iH")

_ADD_BODY_MIN = _KEY + _QQ.size  # key + the entry's (ledgerId, entryId)


class _Need(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Literal[_Need.NEED_DATA] = _Need.NEED_DATA
"""Returned by ``next_event`` when no complete event is buffered."""


class FrameTooLargeError(InvalidMessageError):
    """The encoded message would exceed ``frame_bytes_max``."""


@dataclass(frozen=True, slots=True)
class BadRequest:
    """A frame that could not be decoded into a request; answer EBADREQ with its request id."""

    request_id: int
    reason: str


class _Malformed(Exception):
    pass


# -- decoding ------------------------------------------------------------------------------------------


def _body_flags(flags: int, allowed: int) -> None:
    if flags & ~allowed:
        raise _Malformed(f"flags {flags:#x} not valid for this operation")


_RequestDecoder = Callable[[FrameDecoder, int, int, int, int], Request | AuthRequest]
_ResponseDecoder = Callable[[FrameDecoder, int, int, int, int], Response | AuthResponse]


def _auth_name(dec: FrameDecoder, start: int, end: int) -> tuple[str, int]:
    """The plugin name at ``start`` (``[len:u16][UTF-8]``) and the offset after it."""
    (name_length,) = _H.unpack_from(dec.buffer, start)
    name_end = start + _H.size + name_length
    if name_end > end:
        raise _Malformed(f"AUTH plugin name of {name_length} bytes runs past the frame")
    try:
        return dec.body(start + _H.size, name_end).decode("utf-8"), name_end
    except UnicodeDecodeError:
        raise _Malformed("AUTH plugin name is not UTF-8") from None


def _dec_add(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Request:
    if flags & ~(_RECOVERY | _HIGH):
        raise _Malformed(f"flags {flags:#x} not valid for ADD_ENTRY")
    if end - start < _ADD_BODY_MIN:
        raise _Malformed(f"ADD_ENTRY body of {end - start} bytes is shorter than key + entry ids")
    buf = dec.buffer
    key, ledger_id, entry_id = _KQQ.unpack_from(buf, start)
    body = buf[start + _KEY : end] if type(buf) is bytes else dec.body(start + _KEY, end)
    return AddRequest(rid, ledger_id, entry_id, key, body, bool(flags & _RECOVERY), bool(flags & _HIGH))


def _dec_read(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Request:
    _body_flags(flags, _FENCE | _HIGH)
    size = end - start
    if flags & _FENCE:
        if size != _QQK.size:
            raise _Malformed(f"fencing READ_ENTRY body must be {_QQK.size} bytes, got {size}")
        ledger_id, entry_id, key = _QQK.unpack_from(dec.buffer, start)
        return ReadRequest(rid, ledger_id, entry_id, True, key, bool(flags & _HIGH))
    if size != _QQ.size:
        raise _Malformed(f"READ_ENTRY body must be {_QQ.size} bytes, got {size}")
    ledger_id, entry_id = _QQ.unpack_from(dec.buffer, start)
    return ReadRequest(rid, ledger_id, entry_id, False, None, bool(flags & _HIGH))


def _dec_read_lac(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Request:
    _body_flags(flags, 0)
    if end - start != _Q.size:
        raise _Malformed(f"READ_LAC body must be 8 bytes, got {end - start}")
    return ReadLacRequest(rid, _Q.unpack_from(dec.buffer, start)[0])


def _dec_write_lac(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Request:
    _body_flags(flags, 0)
    if end - start < _QQK.size:
        raise _Malformed(f"WRITE_LAC body of {end - start} bytes is shorter than {_QQK.size}")
    ledger_id, lac, key = _QQK.unpack_from(dec.buffer, start)
    return WriteLacRequest(rid, ledger_id, lac, key, dec.body(start + _QQK.size, end))


def _dec_info(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Request:
    _body_flags(flags, 0)
    if end - start != _Q.size:
        raise _Malformed(f"GET_BOOKIE_INFO body must be 8 bytes, got {end - start}")
    return GetBookieInfoRequest(rid, _Q.unpack_from(dec.buffer, start)[0])


def _dec_auth(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> AuthRequest:
    _body_flags(flags, 0)
    if end - start < _H.size:
        raise _Malformed(f"AUTH body of {end - start} bytes is shorter than the plugin-name length")
    name, name_end = _auth_name(dec, start, end)
    return AuthRequest(rid, name, dec.body(name_end, end))


_REQUEST_DECODERS: dict[int, _RequestDecoder] = {
    OpCode.ADD_ENTRY: _dec_add,
    OpCode.READ_ENTRY: _dec_read,
    OpCode.READ_LAC: _dec_read_lac,
    OpCode.WRITE_LAC: _dec_write_lac,
    OpCode.GET_BOOKIE_INFO: _dec_info,
    OpCode.AUTH: _dec_auth,
}


def _need(size: int, want: int, what: str) -> None:
    if size < want:
        raise _Malformed(f"{what} response body of {size} bytes is shorter than {want}")


def _resp_add(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Response:
    if end - start != _IQQ.size:
        raise _Malformed(f"ADD_ENTRY response body must be {_IQQ.size} bytes, got {end - start}")
    status, ledger_id, entry_id = _IQQ.unpack_from(dec.buffer, start)
    return AddResponse(rid, BookieStatus.from_wire(status), ledger_id, entry_id)


def _resp_read(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Response:
    _need(end - start, _IQQ.size, "READ_ENTRY")
    status, ledger_id, entry_id = _IQQ.unpack_from(dec.buffer, start)
    body = dec.body(start + _IQQ.size, end)
    return ReadResponse(rid, BookieStatus.from_wire(status), ledger_id, entry_id, body)


def _resp_read_lac(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Response:
    _need(end - start, _IQI.size, "READ_LAC")
    status, ledger_id, lac_len = _IQI.unpack_from(dec.buffer, start)
    lac_start = start + _IQI.size
    if lac_len < 0 or lac_start + lac_len > end:
        raise _Malformed(f"READ_LAC response: LAC body length {lac_len} outside the frame")
    lac_body = dec.body(lac_start, lac_start + lac_len)
    last = dec.body(lac_start + lac_len, end)
    return ReadLacResponse(rid, BookieStatus.from_wire(status), ledger_id, lac_body, last)


def _resp_write_lac(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Response:
    if end - start != _IQ.size:
        raise _Malformed(f"WRITE_LAC response body must be {_IQ.size} bytes, got {end - start}")
    status, ledger_id = _IQ.unpack_from(dec.buffer, start)
    return WriteLacResponse(rid, BookieStatus.from_wire(status), ledger_id)


def _resp_info(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Response:
    if end - start != _IQQ.size:
        raise _Malformed(f"GET_BOOKIE_INFO response body must be {_IQQ.size} bytes, got {end - start}")
    status, total, free = _IQQ.unpack_from(dec.buffer, start)
    return GetBookieInfoResponse(rid, BookieStatus.from_wire(status), total, free)


def _resp_error(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> Response:
    _need(end - start, _I.size, "ERROR")
    (status,) = _I.unpack_from(dec.buffer, start)
    message = dec.body(start + _I.size, end).decode("utf-8", errors="replace")
    return ErrorResponse(rid, BookieStatus.from_wire(status), message)


def _resp_auth(dec: FrameDecoder, flags: int, rid: int, start: int, end: int) -> AuthResponse:
    _need(end - start, _IH.size, "AUTH")
    (status,) = _I.unpack_from(dec.buffer, start)
    name, name_end = _auth_name(dec, start + _I.size, end)
    return AuthResponse(rid, BookieStatus.from_wire(status), name, dec.body(name_end, end))


_RESPONSE_DECODERS: dict[int, _ResponseDecoder] = {
    OpCode.ADD_ENTRY: _resp_add,
    OpCode.READ_ENTRY: _resp_read,
    OpCode.READ_LAC: _resp_read_lac,
    OpCode.WRITE_LAC: _resp_write_lac,
    OpCode.GET_BOOKIE_INFO: _resp_info,
    OpCode.AUTH: _resp_auth,
    OP_ERROR: _resp_error,
}


# -- encoding ------------------------------------------------------------------------------------------


def _encode_request(buf: bytearray, req: Request | AuthRequest) -> int:
    """Append the frame of ``req`` to ``buf`` - all of it but an add's ``tail`` parts, which follow it on the
    wire - and return the tail's size (the frame length is checked by the caller)."""
    rid = req.request_id
    tail = 0
    if type(req) is AddRequest:
        body = req.body
        if len(body) < _QQ.size or _QQ.unpack_from(body) != (req.ledger_id, req.entry_id):
            raise InvalidMessageError(
                f"ADD_ENTRY {req.ledger_id}:{req.entry_id}: the packaged entry does not start with its ids"
            )
        flags = (_RECOVERY if req.recovery else 0) | (_HIGH if req.high_priority else 0)
        for part in req.tail:
            tail += len(part)
        buf += _ENC_ADD.pack(12 + _KEY + len(body) + tail, _V | _ADD | flags, rid, req.master_key)
        buf += body
    elif type(req) is ReadRequest:
        high = _HIGH if req.high_priority else 0
        if req.fence:
            buf += _ENC_READ_FENCE.pack(
                12 + _QQK.size, _V | _READ | _FENCE | high, rid, req.ledger_id, req.entry_id, req.master_key
            )
        else:
            buf += _ENC_READ.pack(12 + _QQ.size, _V | _READ | high, rid, req.ledger_id, req.entry_id)
    elif type(req) is ReadLacRequest:
        buf += _ENC_LEDGER.pack(20, _V | _READ_LAC, rid, req.ledger_id)
    elif type(req) is WriteLacRequest:
        head = _ENC_WRITE_LAC.pack(
            12 + _QQK.size + len(req.body), _V | _WRITE_LAC, rid, req.ledger_id, req.lac, req.master_key
        )
        buf += head
        buf += req.body
    elif type(req) is GetBookieInfoRequest:
        buf += _ENC_LEDGER.pack(20, _V | _INFO, rid, req.requested)
    elif type(req) is AuthRequest:
        name = req.plugin_name.encode("utf-8")
        buf += _ENC_AUTH.pack(14 + len(name) + len(req.payload), _V | _AUTH, rid, len(name))
        buf += name
        buf += req.payload
    else:
        raise TypeError(f"not a bookie request: {req!r}")
    return tail


def _encode_response(buf: bytearray, resp: Response | AuthResponse) -> None:
    rid = resp.request_id
    if type(resp) is AddResponse:
        buf += _ENC_STATUS_QQ.pack(32, _V | _ADD, rid, resp.status, resp.ledger_id, resp.entry_id)
    elif type(resp) is ReadResponse:
        body = resp.body
        buf += _ENC_STATUS_QQ.pack(
            32 + len(body), _V | _READ, rid, resp.status, resp.ledger_id, resp.entry_id
        )
        buf += body
    elif type(resp) is ReadLacResponse:
        lac, last = resp.lac_body, resp.last_entry_body
        buf += _ENC_READ_LAC_RESP.pack(
            28 + len(lac) + len(last), _V | _READ_LAC, rid, resp.status, resp.ledger_id, len(lac)
        )
        buf += lac
        buf += last
    elif type(resp) is WriteLacResponse:
        buf += _ENC_WRITE_LAC_RESP.pack(24, _V | _WRITE_LAC, rid, resp.status, resp.ledger_id)
    elif type(resp) is GetBookieInfoResponse:
        buf += _ENC_STATUS_QQ.pack(
            32, _V | _INFO, rid, resp.status, resp.total_disk_bytes, resp.free_disk_bytes
        )
    elif type(resp) is ErrorResponse:
        message = resp.message.encode("utf-8", errors="replace")[:ERROR_MESSAGE_BYTES_MAX]
        buf += _ENC_ERROR.pack(16 + len(message), _V | _ERROR, rid, resp.status)
        buf += message
    elif type(resp) is AuthResponse:
        name = resp.plugin_name.encode("utf-8")
        length = 18 + len(name) + len(resp.payload)
        buf += _ENC_AUTH_RESP.pack(length, _V | _AUTH, rid, resp.status, len(name))
        buf += name
        buf += resp.payload
    else:
        raise TypeError(f"not a bookie response: {resp!r}")


def response_for_status(request: Request, status: BookieStatus) -> Response:
    """The response of ``request``'s own type carrying only ``status`` (ETOOMANYREQUESTS, EIO ...)."""
    rid = request.request_id
    if type(request) is AddRequest:
        return AddResponse(rid, status, request.ledger_id, request.entry_id)
    if type(request) is ReadRequest:
        return ReadResponse(rid, status, request.ledger_id, request.entry_id)
    if type(request) is ReadLacRequest:
        return ReadLacResponse(rid, status, request.ledger_id)
    if type(request) is WriteLacRequest:
        return WriteLacResponse(rid, status, request.ledger_id)
    return GetBookieInfoResponse(rid, status)


# -- the two sides -----------------------------------------------------------------------------------------


class _Side:
    __slots__ = ("_decoder", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._decoder = FrameDecoder(frame_bytes_max)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the connection (any chunking)."""
        self._decoder.receive_data(data)

    @property
    def buffered_bytes(self) -> int:
        return self._decoder.buffered_bytes

    @property
    def bytes_skipped(self) -> int:
        """Bytes of oversized frames dropped so far."""
        return self._decoder.bytes_skipped

    def pending_request_id(self) -> int | None:
        """The request id of the frame being received, once its header has arrived (to answer it early)."""
        return self._decoder.pending_request_id()

    def _check_size(self, buf: bytearray, mark: int, what: object, tail: int = 0) -> None:
        size = len(buf) - mark + tail
        if size > self.frame_bytes_max:
            del buf[mark:]
            raise FrameTooLargeError(
                f"{type(what).__name__} frame of {size} bytes exceeds frame_bytes_max={self.frame_bytes_max}"
            )


class ClientProtocol(_Side):
    """The client side of one connection: encodes requests, decodes responses."""

    __slots__ = ()

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        super().__init__(frame_bytes_max)

    def send(self, request: Request | AuthRequest) -> bytes:
        buf = bytearray()
        self.send_into(buf, request)
        return bytes(buf)

    def send_into(self, buf: bytearray, request: Request | AuthRequest) -> None:
        """Append the request's whole frame to ``buf`` (an add's tail parts copied in).

        Raises :class:`FrameTooLargeError` (``buf`` unchanged) or :class:`InvalidMessageError`.
        """
        for part in self.send_parts(buf, request):
            buf += part

    def send_parts(self, buf: bytearray, request: Request | AuthRequest) -> tuple[bytes | memoryview, ...]:
        """Append the request's frame to ``buf`` (the connection's outgoing buffer) but for an add's tail
        parts, which it returns: the caller sends them, as they are, right after ``buf``'s new bytes (the
        payload is not copied into ``buf``). Most requests have no tail: ``()``.

        Raises :class:`FrameTooLargeError` (``buf`` unchanged) or :class:`InvalidMessageError`.
        """
        mark = len(buf)
        tail = _encode_request(buf, request)
        self._check_size(buf, mark, request, tail)
        return request.tail if tail and type(request) is AddRequest else ()

    def next_event(self) -> Response | AuthResponse | FramingError | Literal[_Need.NEED_DATA]:
        """The next response; an undecodable response frame becomes ``ErrorResponse(id, EBADREQ)``."""
        dec = self._decoder
        frame = dec.next_frame()
        if type(frame) is tuple:
            word, rid, start, end = frame
            decoder = _RESPONSE_DECODERS.get((word >> 16) & 0xFF)
            if word >> 24 != PROTOCOL_VERSION or decoder is None:
                return ErrorResponse(rid, BookieStatus.EBADREQ, f"undecodable response header {word:#010x}")
            try:
                return decoder(dec, word & 0xFFFF, rid, start, end)
            except (_Malformed, InvalidMessageError, struct.error, ValueError) as exc:
                return ErrorResponse(rid, BookieStatus.EBADREQ, f"undecodable response: {exc}")
        if frame is None:
            return NEED_DATA
        if type(frame) is OversizedFrame:
            return ErrorResponse(
                frame.request_id,
                BookieStatus.EBADREQ,
                f"response frame of {frame.frame_bytes} bytes exceeds frame_bytes_max={self.frame_bytes_max}",
            )
        if type(frame) is ShortFrame:
            reason = f"short response frame of {frame.frame_bytes} bytes"
            return ErrorResponse(0, BookieStatus.EBADREQ, reason)
        assert type(frame) is FramingError
        return frame


class ServerProtocol(_Side):
    """The bookie side of one connection: decodes requests, encodes responses."""

    __slots__ = ()

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        super().__init__(frame_bytes_max)

    def send(self, response: Response | AuthResponse) -> bytes:
        buf = bytearray()
        self.send_into(buf, response)
        return bytes(buf)

    def send_into(self, buf: bytearray, response: Response | AuthResponse) -> None:
        """Append the response's frame to ``buf``.

        A response that would not fit in ``frame_bytes_max`` is replaced by an EIO error response for
        the same request (the client could not accept the frame anyway).
        """
        mark = len(buf)
        _encode_response(buf, response)
        if len(buf) - mark > self.frame_bytes_max:
            size = len(buf) - mark
            del buf[mark:]
            _encode_response(
                buf,
                ErrorResponse(
                    response.request_id,
                    BookieStatus.EIO,
                    f"response of {size} bytes exceeds frame_bytes_max={self.frame_bytes_max}",
                ),
            )

    def next_event(self) -> Request | AuthRequest | BadRequest | FramingError | Literal[_Need.NEED_DATA]:
        dec = self._decoder
        frame = dec.next_frame()
        if type(frame) is tuple:
            word, rid, start, end = frame
            if word >> 24 != PROTOCOL_VERSION:
                return BadRequest(rid, f"unsupported protocol version {word >> 24}")
            decoder = _REQUEST_DECODERS.get((word >> 16) & 0xFF)
            if decoder is None:
                return BadRequest(rid, f"unknown opcode {(word >> 16) & 0xFF}")
            try:
                return decoder(dec, word & 0xFFFF, rid, start, end)
            except (_Malformed, InvalidMessageError, struct.error) as exc:
                return BadRequest(rid, str(exc))
        if frame is None:
            return NEED_DATA
        if type(frame) is OversizedFrame:
            return BadRequest(
                frame.request_id,
                f"frame of {frame.frame_bytes} bytes exceeds frame_bytes_max={self.frame_bytes_max}",
            )
        if type(frame) is ShortFrame:
            return BadRequest(0, f"frame of {frame.frame_bytes} bytes cannot hold a header")
        assert type(frame) is FramingError
        return frame
