"""An add's payload leaves the client for a real bookie's socket without being copied: the digest is computed
over its parts and the frame head goes in the coalescing buffer, the parts go to ``sendmsg`` as they are.
Counted by identity: every buffer handed to the socket is either the payload object itself or smaller than it
(a head, the 10-byte prefix copied in), and the bookie stores the same bytes as a joined entry would be."""

from __future__ import annotations

import pytest
import trio
from fixtures.bookie_server import KEY, call, running_bookie
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.client import tcp_transport
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.client.transport import next_request_id
from magnetar.bookkeeper.protocol.codec import ClientProtocol
from magnetar.bookkeeper.protocol.digest import Digester, DigestType
from magnetar.bookkeeper.protocol.messages import AddRequest, AddResponse, ReadRequest, ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus
from magnetar.bookkeeper.runtime import Buffer, rest_after

PREFIX = b"Mi" + bytes(8)


def payload_copies(sent: list[Buffer], payload: bytes) -> int:
    """How many buffers handed to the socket hold the payload's bytes without being the payload itself."""
    return sum(1 for part in sent if part is not payload and payload in bytes(part))


async def test_an_add_reaches_the_bookie_socket_without_a_copy_of_its_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Buffer] = []
    real = tcp_transport.send_parts

    async def recording(stream: trio.abc.Stream, parts: list[Buffer]) -> None:
        sent.extend(parts)
        await real(stream, parts)

    monkeypatch.setattr(tcp_transport, "send_parts", recording)
    digester = Digester(DigestType.CRC32C)
    payloads = [bytes([i]) * 16_384 + b"entry %d" % i for i in range(3)]
    async with running_bookie() as bookie, open_tcp_transport() as transport:
        length = 0
        for entry_id, payload in enumerate(payloads):
            length += len(PREFIX) + len(payload)
            parts = (PREFIX, payload)  # as the managed ledger hands them over
            head = digester.package_head(9, entry_id, entry_id - 1, length, parts)
            answer = await call(
                transport, bookie.bookie_id, AddRequest(next_request_id(), 9, entry_id, KEY, head, tail=parts)
            )
            assert isinstance(answer, AddResponse)
            assert answer.status is BookieStatus.EOK
        for payload in payloads:
            assert sum(1 for part in sent if part is payload) == 1  # handed to sendmsg itself
            assert payload_copies(sent, payload) == 0  # and nowhere else
        length = 0
        for entry_id, payload in enumerate(payloads):  # stored as the joined entry would have been
            length += len(PREFIX) + len(payload)
            read = await call(transport, bookie.bookie_id, ReadRequest(next_request_id(), 9, entry_id))
            assert isinstance(read, ReadResponse)
            assert read.body == digester.package(9, entry_id, entry_id - 1, length, PREFIX + payload)
            assert digester.unpack(read.body, 9, entry_id).payload == PREFIX + payload


@given(st.lists(st.binary(max_size=300), max_size=6), st.integers(0, 2_000))
def test_a_gather_frame_is_the_joined_frame(parts: list[bytes], key: int) -> None:
    """``send_parts`` + the tail on the wire equals the frame of the request whole; the digest over the parts
    equals the digest over their join."""
    digester = Digester(DigestType.CRC32C if key % 2 else DigestType.HMAC, b"pw")
    payload = tuple(parts)
    head = digester.package_head(3, 4, 2, 10 + key, payload)
    assert head + b"".join(payload) == digester.package(3, 4, 2, 10 + key, b"".join(payload))
    request = AddRequest(1, 3, 4, KEY, head, tail=payload)
    buf = bytearray()
    tail = ClientProtocol().send_parts(buf, request)
    assert bytes(buf) + b"".join(tail) == ClientProtocol().send(request.whole())
    assert all(any(t is p for p in payload) for t in tail)  # the parts themselves, not copies


@given(st.lists(st.binary(max_size=50), max_size=8), st.data())
def test_rest_after_drops_exactly_the_bytes_written(parts: list[bytes], data: st.DataObject) -> None:
    total = b"".join(parts)
    sent = data.draw(st.integers(0, len(total)))
    rest = rest_after(parts, sent)
    assert b"".join(bytes(p) for p in rest) == total[sent:]
    assert all(len(p) for p in rest[:1])  # never offers an empty first buffer
