"""Stream behaviour of the codec: any chunking, generated messages, garbage, oversized and broken frames."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.bookkeeper.protocol.codec import NEED_DATA, BadRequest, ClientProtocol, ServerProtocol
from magnetar.bookkeeper.protocol.frames import FRAME_BYTES_MAX_DEFAULT, FramingError
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
    ErrorResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
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

ids = st.integers(0, 2**63 - 1)
keys = st.binary(min_size=20, max_size=20)
blobs = st.binary(max_size=300)
statuses = st.sampled_from(list(BookieStatus))


@st.composite
def add_requests(draw: st.DrawFn) -> AddRequest:
    ledger, entry = draw(ids), draw(ids)
    body = struct.pack(">qq", ledger, entry) + draw(blobs)
    return AddRequest(draw(ids), ledger, entry, draw(keys), body, draw(st.booleans()), draw(st.booleans()))


@st.composite
def read_requests(draw: st.DrawFn) -> ReadRequest:
    fence = draw(st.booleans())
    return ReadRequest(
        draw(ids),
        draw(ids),
        draw(st.integers(-1, 2**63 - 1)),
        fence,
        draw(keys) if fence else None,
        draw(st.booleans()),
    )


requests: st.SearchStrategy[Request] = st.one_of(
    add_requests(),
    read_requests(),
    st.builds(ReadLacRequest, ids, ids),
    st.builds(WriteLacRequest, ids, ids, st.integers(-1, 2**63 - 1), keys, blobs),
    st.builds(GetBookieInfoRequest, ids, st.integers(0, 3)),
)
signed = st.integers(-(2**63), 2**63 - 1)
responses: st.SearchStrategy[Response] = st.one_of(
    st.builds(AddResponse, ids, statuses, signed, signed),
    st.builds(ReadResponse, ids, statuses, signed, signed, blobs),
    st.builds(ReadLacResponse, ids, statuses, signed, blobs, blobs),
    st.builds(WriteLacResponse, ids, statuses, signed),
    st.builds(GetBookieInfoResponse, ids, statuses, signed, signed),
    st.builds(ErrorResponse, ids, statuses, st.text(max_size=50)),
)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in [*points, len(data)]:
        pieces.append(data[last:p])
        last = p
    return pieces


def drain(side: ClientProtocol | ServerProtocol) -> list[object]:
    out: list[object] = []
    while (event := side.next_event()) is not NEED_DATA:
        out.append(event)
        if isinstance(event, FramingError):
            break
    return out


@given(st.lists(requests, max_size=20), st.lists(st.integers(0, 10_000), max_size=30))
def test_requests_round_trip_under_any_chunking(batch: list[Request], cuts: list[int]) -> None:
    client = ClientProtocol()
    wire = bytearray()
    for request in batch:
        client.send_into(wire, request)
    server = ServerProtocol()
    got: list[object] = []
    for piece in chunked(bytes(wire), cuts):
        server.receive_data(piece)
        got.extend(drain(server))
    assert got == batch
    assert server.buffered_bytes == 0


@given(st.lists(responses, max_size=20), st.lists(st.integers(0, 10_000), max_size=30))
def test_responses_round_trip_under_any_chunking(batch: list[Response], cuts: list[int]) -> None:
    server = ServerProtocol()
    wire = b"".join(server.send(r) for r in batch)
    client = ClientProtocol()
    got: list[object] = []
    for piece in chunked(wire, cuts):
        client.receive_data(piece)
        got.extend(drain(client))
    assert got == batch


@settings(max_examples=30)
@given(st.lists(requests, min_size=1, max_size=5))
def test_requests_fed_one_byte_at_a_time(batch: list[Request]) -> None:
    wire = b"".join(ClientProtocol().send(r) for r in batch)
    server = ServerProtocol()
    got: list[object] = []
    for i in range(len(wire)):
        server.receive_data(wire[i : i + 1])
        got.extend(drain(server))
    assert got == batch


@given(st.binary(max_size=2000), st.lists(st.integers(0, 3000), max_size=10))
def test_garbage_never_raises_out_of_either_decoder(garbage: bytes, cuts: list[int]) -> None:
    server = ServerProtocol(frame_bytes_max=1024)
    client = ClientProtocol(frame_bytes_max=1024)
    for piece in chunked(garbage, cuts):
        server.receive_data(piece)
        client.receive_data(piece)
        for event in drain(server):
            assert isinstance(event, BadRequest | FramingError | Request)
        for event in drain(client):
            assert isinstance(event, FramingError | Response)
        assert server.buffered_bytes <= len(garbage)


@given(st.integers(4096, 65536), st.integers(FRAME_BYTES_MAX_DEFAULT + 1, 2 * FRAME_BYTES_MAX_DEFAULT))
@settings(max_examples=10, deadline=None)
def test_oversized_frame_is_answered_and_never_buffered(chunk: int, frame_bytes: int) -> None:
    server = ServerProtocol()
    head = struct.pack(">iIq", frame_bytes - 4, (3 << 24) | (1 << 16), 42)
    follow = ClientProtocol().send(ReadLacRequest(43, 7))
    events: list[object] = []
    remaining = frame_bytes - len(head)
    server.receive_data(head[:5])
    events.extend(drain(server))
    server.receive_data(head[5:])
    filler = bytes(chunk)
    while remaining > 0:
        piece = filler[: min(chunk, remaining)]
        remaining -= len(piece)
        server.receive_data(piece)
        events.extend(drain(server))
        assert server.buffered_bytes <= chunk + len(head)
    server.receive_data(follow)
    events.extend(drain(server))
    assert len(events) == 2
    bad, good = events
    assert isinstance(bad, BadRequest)
    assert bad.request_id == 42
    assert "exceeds frame_bytes_max" in bad.reason
    assert good == ReadLacRequest(43, 7)
    assert server.bytes_skipped == frame_bytes


def test_oversized_frame_in_one_chunk_is_dropped_at_once() -> None:
    server = ServerProtocol(frame_bytes_max=64)
    big = struct.pack(">iIq", 200 - 4, (3 << 24) | (2 << 16), 5) + bytes(184)
    server.receive_data(big + ClientProtocol().send(ReadLacRequest(6, 1)))
    first = server.next_event()
    assert isinstance(first, BadRequest)
    assert first.request_id == 5
    assert server.next_event() == ReadLacRequest(6, 1)
    assert server.next_event() is NEED_DATA
    assert server.buffered_bytes == 0


def test_oversized_response_is_an_error_for_that_request_only() -> None:
    client = ClientProtocol(frame_bytes_max=64)
    wire = ServerProtocol().send(ReadResponse(5, BookieStatus.EOK, 1, 2, bytes(100)))
    client.receive_data(wire + ServerProtocol().send(WriteLacResponse(6, BookieStatus.EOK, 1)))
    first = client.next_event()
    assert isinstance(first, ErrorResponse)
    assert (first.request_id, first.status) == (5, BookieStatus.EBADREQ)
    assert client.next_event() == WriteLacResponse(6, BookieStatus.EOK, 1)


def test_negative_length_ends_the_stream_for_good() -> None:
    server = ServerProtocol()
    server.receive_data(struct.pack(">i", -5) + b"rest")
    event = server.next_event()
    assert isinstance(event, FramingError)
    assert "negative" in event.reason
    server.receive_data(ClientProtocol().send(ReadLacRequest(1, 1)))
    assert server.next_event() == event
    assert server.buffered_bytes == 0


@given(st.lists(requests, min_size=1, max_size=5), st.data())
def test_truncated_stream_waits_for_more(batch: list[Request], data: st.DataObject) -> None:
    wire = b"".join(ClientProtocol().send(r) for r in batch)
    cut = data.draw(st.integers(0, len(wire) - 1))
    server = ServerProtocol()
    server.receive_data(wire[:cut])
    got = drain(server)
    assert got == batch[: len(got)]
    assert len(got) < len(batch)


@given(st.lists(responses, max_size=10))
def test_malformed_response_body_fails_only_that_request(batch: list[Response]) -> None:
    # An ADD_ENTRY response with a body one byte short, then valid responses.
    bad = struct.pack(">iIqiq", 24, (3 << 24) | (1 << 16), 77, 0, 1) + b"\x00"
    bad = struct.pack(">i", len(bad) - 4) + bad[4:]
    client = ClientProtocol()
    client.receive_data(bad + b"".join(ServerProtocol().send(r) for r in batch))
    events = drain(client)
    first = events[0]
    assert isinstance(first, ErrorResponse)
    assert (first.request_id, first.status) == (77, BookieStatus.EBADREQ)
    assert events[1:] == batch


@given(st.integers(1024, 70_000), st.integers(0, 3))
@settings(max_examples=10, deadline=None)
def test_large_frames_arriving_in_small_chunks(chunk: int, small_before: int) -> None:
    big = AddRequest(9, 1, 2, bytes(20), struct.pack(">qq", 1, 2) + bytes(range(256)) * 4096)  # ~1 MiB
    smalls = [ReadLacRequest(i + 1, 1) for i in range(small_before)]
    batch: list[Request] = [*smalls, big, ReadLacRequest(10, 1)]
    wire = b"".join(ClientProtocol().send(r) for r in batch)
    server = ServerProtocol()
    got: list[object] = []
    for offset in range(0, len(wire), chunk):
        server.receive_data(wire[offset : offset + chunk])
        got.extend(drain(server))
        assert server.buffered_bytes <= len(ClientProtocol().send(big)) + chunk
    assert got == batch
    assert server.buffered_bytes == 0
