"""Golden encodings: every message, byte by byte, as documented in the codec's module docstring."""

from __future__ import annotations

import pytest

from magnetar.bookkeeper.protocol.codec import (
    NEED_DATA,
    BadRequest,
    ClientProtocol,
    FrameTooLargeError,
    ServerProtocol,
    response_for_status,
)
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
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
from magnetar.bookkeeper.protocol.status import BookieStatus

KEY = bytes(range(20))
KEY_HEX = KEY.hex()
# A stand-in packaged entry: the codec only interprets its first 16 bytes (ledgerId, entryId).
ENTRY = bytes.fromhex("0000000000000005 0000000000000003") + b"payload"
ENTRY_HEX = ENTRY.hex()


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


REQUESTS: list[tuple[Request, bytes]] = [
    (
        AddRequest(7, 5, 3, KEY, ENTRY),
        # len=12+20+23 | v3 op1 flags0 | rid 7 | key | entry
        hx(f"00000037 | 03010000 | 0000000000000007 | {KEY_HEX} | {ENTRY_HEX}"),
    ),
    (
        AddRequest(8, 5, 3, KEY, ENTRY, recovery=True, high_priority=True),
        hx(f"00000037 | 03010006 | 0000000000000008 | {KEY_HEX} | {ENTRY_HEX}"),
    ),
    (
        ReadRequest(9, 5, 3),
        hx("0000001c | 03020000 | 0000000000000009 | 0000000000000005 | 0000000000000003"),
    ),
    (
        ReadRequest(10, 5, -1, fence=True, master_key=KEY, high_priority=True),
        hx(f"00000030 | 03020005 | 000000000000000a | 0000000000000005 | ffffffffffffffff | {KEY_HEX}"),
    ),
    (
        ReadLacRequest(11, 5),
        hx("00000014 | 03040000 | 000000000000000b | 0000000000000005"),
    ),
    (
        WriteLacRequest(12, 5, 4, KEY, b"lacbody"),
        hx(
            f"00000037 | 03050000 | 000000000000000c | 0000000000000005 | 0000000000000004 | {KEY_HEX}"
            f" | {b'lacbody'.hex()}"
        ),
    ),
    (
        GetBookieInfoRequest(13, 3),
        hx("00000014 | 03060000 | 000000000000000d | 0000000000000003"),
    ),
]

RESPONSES: list[tuple[Response, bytes]] = [
    (
        AddResponse(7, BookieStatus.EOK, 5, 3),
        hx("00000020 | 03010000 | 0000000000000007 | 00000000 | 0000000000000005 | 0000000000000003"),
    ),
    (
        AddResponse(7, BookieStatus.EFENCED, 5, 3),
        hx("00000020 | 03010000 | 0000000000000007 | 00000068 | 0000000000000005 | 0000000000000003"),
    ),
    (
        ReadResponse(9, BookieStatus.EOK, 5, 3, ENTRY),
        hx(
            "00000037 | 03020000 | 0000000000000009 | 00000000 | 0000000000000005 | 0000000000000003"
            f" | {ENTRY_HEX}"
        ),
    ),
    (
        ReadResponse(9, BookieStatus.ENOENTRY, 5, 3),
        hx("00000020 | 03020000 | 0000000000000009 | 00000002 | 0000000000000005 | 0000000000000003"),
    ),
    (
        ReadLacResponse(11, BookieStatus.EOK, 5, b"lac", ENTRY),
        hx(
            "00000036 | 03040000 | 000000000000000b | 00000000 | 0000000000000005 | 00000003 | 6c6163"
            f" | {ENTRY_HEX}"
        ),
    ),
    (
        ReadLacResponse(11, BookieStatus.ENOLEDGER, 5),
        hx("0000001c | 03040000 | 000000000000000b | 00000001 | 0000000000000005 | 00000000"),
    ),
    (
        WriteLacResponse(12, BookieStatus.EUA, 5),
        hx("00000018 | 03050000 | 000000000000000c | 00000066 | 0000000000000005"),
    ),
    (
        GetBookieInfoResponse(13, BookieStatus.EOK, 1000, 250),
        hx("00000020 | 03060000 | 000000000000000d | 00000000 | 00000000000003e8 | 00000000000000fa"),
    ),
    (
        ErrorResponse(14, BookieStatus.EBADREQ, "bad"),
        hx("00000013 | 037f0000 | 000000000000000e | 00000064 | 626164"),
    ),
]


@pytest.mark.parametrize(("request_", "wire"), REQUESTS, ids=lambda v: type(v).__name__)
def test_request_golden_encoding_and_decoding(request_: Request, wire: bytes) -> None:
    assert ClientProtocol().send(request_) == wire
    server = ServerProtocol()
    server.receive_data(wire)
    assert server.next_event() == request_
    assert server.next_event() is NEED_DATA


@pytest.mark.parametrize(("response", "wire"), RESPONSES, ids=lambda v: type(v).__name__)
def test_response_golden_encoding_and_decoding(response: Response, wire: bytes) -> None:
    assert ServerProtocol().send(response) == wire
    client = ClientProtocol()
    client.receive_data(wire)
    assert client.next_event() == response
    assert client.next_event() is NEED_DATA


def test_add_whose_entry_does_not_carry_its_ids_is_refused_at_encoding() -> None:
    with pytest.raises(InvalidMessageError):
        ClientProtocol().send(AddRequest(1, 5, 4, KEY, ENTRY))
    with pytest.raises(InvalidMessageError):
        ClientProtocol().send(AddRequest(1, 5, 3, KEY, b"short"))


def test_request_over_frame_bytes_max_is_refused_and_leaves_the_buffer_untouched() -> None:
    client = ClientProtocol(frame_bytes_max=100)
    buf = bytearray(b"queued")
    big = ENTRY + b"x" * 100
    with pytest.raises(FrameTooLargeError):
        client.send_into(buf, AddRequest(1, 5, 3, KEY, big))
    assert buf == b"queued"


def test_oversized_response_is_replaced_by_an_eio_error() -> None:
    server = ServerProtocol(frame_bytes_max=64)
    wire = server.send(ReadResponse(3, BookieStatus.EOK, 5, 3, ENTRY + b"y" * 64))
    client = ClientProtocol()
    client.receive_data(wire)
    event = client.next_event()
    assert isinstance(event, ErrorResponse)
    assert (event.request_id, event.status) == (3, BookieStatus.EIO)


def test_unknown_status_code_reads_as_ebadreq() -> None:
    client = ClientProtocol()
    client.receive_data(hx("00000018 | 03050000 | 000000000000000c | 000003e7 | 0000000000000005"))
    assert client.next_event() == WriteLacResponse(12, BookieStatus.EBADREQ, 5)


@pytest.mark.parametrize(
    ("wire", "request_id", "reason"),
    [
        (hx("00000014 | 02040000 | 0000000000000001 | 0000000000000005"), 1, "version"),
        (hx("00000014 | 03090000 | 0000000000000002 | 0000000000000005"), 2, "opcode"),
        (hx("00000014 | 03040001 | 0000000000000003 | 0000000000000005"), 3, "flags"),
        (hx("00000010 | 03040000 | 0000000000000004 | 00000005"), 4, "8 bytes"),
        (hx("0000001c | 03020001 | 0000000000000005 | 0000000000000005 | 0000000000000003"), 5, "fencing"),
        (hx("0000001c | 03020000 | 0000000000000006 | fffffffffffffffb | 0000000000000003"), 6, "ledger_id"),
        (hx("0000001c | 03020000 | 8000000000000000 | 0000000000000005 | 0000000000000003"), -(2**63), "id"),
        (hx(f"00000020 | 03010000 | 0000000000000008 | {KEY_HEX}"), 8, "shorter"),
        (hx("00000014 | 03010000 | 0000000000000009 | 0000000000000005"), 9, "shorter"),
        (hx("00000004 | 00000000"), 0, "header"),
    ],
)
def test_malformed_request_is_a_bad_request_and_decoding_goes_on(
    wire: bytes, request_id: int, reason: str
) -> None:
    server = ServerProtocol()
    good = ClientProtocol().send(ReadLacRequest(99, 5))
    server.receive_data(wire + good)
    event = server.next_event()
    assert isinstance(event, BadRequest)
    assert event.request_id == request_id
    assert reason in event.reason
    assert server.next_event() == ReadLacRequest(99, 5)


@pytest.mark.parametrize(
    "request_",
    [
        AddRequest(1, 2, 3, KEY, ENTRY.replace(bytes.fromhex("0000000000000005"), bytes(8), 1)[:16]),
        ReadRequest(1, 2, 3),
        ReadLacRequest(1, 2),
        WriteLacRequest(1, 2, 3, KEY, b""),
        GetBookieInfoRequest(1),
    ],
    ids=lambda v: type(v).__name__,
)
def test_response_for_status_matches_the_request_type(request_: Request) -> None:
    response = response_for_status(request_, BookieStatus.ETOOMANYREQUESTS)
    assert response.request_id == 1
    assert response.status is BookieStatus.ETOOMANYREQUESTS
    assert type(response).__name__ == type(request_).__name__.replace("Request", "Response")
