"""The AUTH exchange of the bookie protocol (opcode 3): golden encodings and malformed frames."""

from __future__ import annotations

import pytest

from magnetar.bookkeeper.protocol.codec import NEED_DATA, BadRequest, ClientProtocol, ServerProtocol
from magnetar.bookkeeper.protocol.messages import (
    AUTH_PAYLOAD_BYTES_MAX,
    AuthRequest,
    AuthResponse,
    ErrorResponse,
    InvalidMessageError,
    ReadLacRequest,
)
from magnetar.bookkeeper.protocol.status import BookieStatus


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


TOKEN = b"aaa.bbb.ccc"


def test_auth_request_golden() -> None:
    request = AuthRequest(7, "token", TOKEN)
    # len=12+2+5+11 | v3 op3 flags0 | rid 7 | name length 5 | "token" | payload
    wire = hx(f"0000001e | 03030000 | 0000000000000007 | 0005 | {b'token'.hex()} | {TOKEN.hex()}")
    assert ClientProtocol().send(request) == wire
    server = ServerProtocol()
    server.receive_data(wire)
    assert server.next_event() == request
    assert server.next_event() is NEED_DATA


@pytest.mark.parametrize(
    ("response", "wire"),
    [
        (
            AuthResponse(7, BookieStatus.EOK, "token"),
            hx(f"00000017 | 03030000 | 0000000000000007 | 00000000 | 0005 | {b'token'.hex()}"),
        ),
        (
            AuthResponse(7, BookieStatus.EUA, "token", b"expired"),
            hx(
                f"0000001e | 03030000 | 0000000000000007 | 00000066 | 0005 | {b'token'.hex()}"
                f" | {b'expired'.hex()}"
            ),
        ),
    ],
)
def test_auth_response_golden(response: AuthResponse, wire: bytes) -> None:
    assert ServerProtocol().send(response) == wire
    client = ClientProtocol()
    client.receive_data(wire)
    assert client.next_event() == response
    assert client.next_event() is NEED_DATA


def test_the_token_stays_out_of_repr() -> None:
    assert "aaa" not in repr(AuthRequest(1, "token", TOKEN))
    assert AuthResponse(1, BookieStatus.EUA, "token", "nope ✗".encode()).reason == "nope ✗"


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (hx("0000000d | 03030000 | 0000000000000001 | 00"), "shorter"),
        (hx("00000012 | 03030000 | 0000000000000002 | 0009 | 61626364"), "runs past"),
        (hx("0000000f | 03030000 | 0000000000000003 | 0001 | ff"), "UTF-8"),
        (hx("00000010 | 03030000 | 0000000000000004 | 0000 | 6162"), "plugin name"),
        (hx("0000000f | 03030001 | 0000000000000005 | 0001 | 61"), "flags"),
    ],
)
def test_malformed_auth_is_a_bad_request_and_decoding_goes_on(wire: bytes, reason: str) -> None:
    server = ServerProtocol()
    server.receive_data(wire + ClientProtocol().send(ReadLacRequest(99, 5)))
    event = server.next_event()
    assert isinstance(event, BadRequest)
    assert reason in event.reason
    assert server.next_event() == ReadLacRequest(99, 5)


def test_malformed_auth_response_is_an_error_for_that_request() -> None:
    client = ClientProtocol()
    client.receive_data(hx("00000013 | 03030000 | 0000000000000009 | 00000000 | 0009 | 61"))
    event = client.next_event()
    assert isinstance(event, ErrorResponse)
    assert (event.request_id, event.status) == (9, BookieStatus.EBADREQ)


def test_auth_message_bounds() -> None:
    with pytest.raises(InvalidMessageError, match="plugin name"):
        AuthRequest(1, "", TOKEN)
    with pytest.raises(InvalidMessageError, match="plugin name"):
        AuthRequest(1, "x" * 256, TOKEN)
    with pytest.raises(InvalidMessageError, match="payload"):
        AuthRequest(1, "token", bytes(AUTH_PAYLOAD_BYTES_MAX + 1))
    with pytest.raises(InvalidMessageError, match="request_id"):
        AuthRequest(-1, "token", TOKEN)
