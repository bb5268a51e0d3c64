"""Where an add's payload is copied between the bookie's socket read and the journal's fdatasync
(docs/architecture.md §1.4): a body of ``BODY_BY_REFERENCE_BYTES_MIN`` bytes or more once, by the protocol's
decoder, which hands the body out as a ``bytes`` slice of the received chunk; the engine journals and caches
that very object, and the journal hands it to ``pwritev`` as it is (a smaller body is copied into the
journal's batch, as every body was before)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

from magnetar.bookkeeper.bookie.storage import journal_files
from magnetar.bookkeeper.bookie.storage.engine import open_ledger_store
from magnetar.bookkeeper.bookie.storage.journal_format import BODY_BY_REFERENCE_BYTES_MIN
from magnetar.bookkeeper.protocol.codec import ClientProtocol, ServerProtocol
from magnetar.bookkeeper.protocol.messages import AddRequest

KEY = b"k" * 20


def decoded_add(body: bytes) -> AddRequest:
    """The add ``body`` travels in, as the bookie's connection decodes it from one socket read."""
    chunk = ClientProtocol().send(AddRequest(1, 7, 0, KEY, body, False, False))
    decoder = ServerProtocol()
    decoder.receive_data(chunk)
    request = decoder.next_event()
    assert isinstance(request, AddRequest)
    return request


async def test_the_decoded_body_is_the_object_the_journal_writes_and_the_write_cache_keeps(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = make_entry(7, 0, b"x" * BODY_BY_REFERENCE_BYTES_MIN)
    request = decoded_add(body)
    assert request.body == body
    assert type(request.body) is bytes
    assert request.body is not body  # the decoder's slice: the one copy

    written: list[object] = []
    real_pwritev = os.pwritev

    def recording(fd: int, buffers: Sequence[Any], offset: int) -> int:
        written.extend(buffer.obj if isinstance(buffer, memoryview) else buffer for buffer in buffers)
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(journal_files.os, "pwritev", recording)
    async with open_ledger_store(make_settings()) as store:
        store.create_ledger(7, KEY, durability.callback("create"))
        store.add_entry(7, 0, request.body, durability.callback("add"))
        await durability.wait_for(2)
        assert durability.results == [("create", None), ("add", None)]
        # the journal wrote the decoded object itself (no copy into a batch buffer) ...
        assert [part for part in written if part is request.body] == [request.body]
        assert not [part for part in written if part is not request.body and bytes(part).find(body) >= 0]
        # ... and the write cache keeps that same immutable object until the checkpoint
        assert store._cache.active.get(7, 0) is request.body
        assert store.read_entry(7, 0) == body


async def test_a_mutable_body_is_copied_at_the_journals_door(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal writes a body after the append returns: a buffer its caller could change is copied."""
    written: list[object] = []
    real_pwritev = os.pwritev

    def recording(fd: int, buffers: Sequence[Any], offset: int) -> int:
        written.extend(bytes(buffer) for buffer in buffers)
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(journal_files.os, "pwritev", recording)
    body = make_entry(7, 0, b"x" * BODY_BY_REFERENCE_BYTES_MIN)
    mutable = bytearray(body)
    async with open_ledger_store(make_settings()) as store:
        store.create_ledger(7, KEY, durability.callback("create"))
        store.journal.append_entry(mutable, durability.callback("add"))  # type: ignore[arg-type]
        mutable[-1] ^= 0xFF
        await durability.wait_for(2)
        assert durability.errors == []
        assert body in written
