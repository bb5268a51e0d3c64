"""Chunks on Pulsar's binary protocol, sans-IO: the chunk fields of ``MessageMetadata`` read and written,
a chunk SEND made a chunk entry whose message carries them back, forged fields refused by name; and the
two settings that bound chunks (``max_message_size``, ``chunked_message_bytes_max``), with hostile values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.admin.rest.messages import entry_response
from magnetar.broker.protocols.pulsar_binary.commands import CompressionType, ServerError
from magnetar.broker.protocols.pulsar_binary.connection import SendRefused, compact_messages
from magnetar.broker.protocols.pulsar_binary.framing import PayloadSection
from magnetar.broker.protocols.pulsar_binary.metadata import MessageMetadata, decode_metadata, encode_metadata
from magnetar.broker.protocols.pulsar_binary.protobuf import Writer
from magnetar.broker.sessions.binary_door import ENTRY_FIELDS_MAX
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire.entry_format import (
    CHUNK_UUID_BYTES_MAX,
    PRODUCER_NAME_BYTES_MAX,
    ChunkInfo,
    compact_entry_bytes,
    decode_entry,
    encode_compact_batch,
)
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.position import Position


def _section(meta: MessageMetadata | bytes, payload: bytes) -> PayloadSection:
    data = meta if isinstance(meta, bytes) else encode_metadata(meta)
    return PayloadSection(data, payload, has_checksum=True, checksum_ok=True)


def _meta(chunk: ChunkInfo | None, **fields: Any) -> MessageMetadata:
    return MessageMetadata("p", 7, 1000, chunk=chunk, **fields)


@given(
    st.text(min_size=1, max_size=40),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
)
def test_chunk_fields_round_trip(uuid: str, chunk_id: int, num_chunks: int, total: int) -> None:
    chunk = ChunkInfo(uuid, chunk_id, num_chunks, total)
    assert decode_metadata(encode_metadata(_meta(chunk))).chunk == chunk
    assert decode_metadata(encode_metadata(_meta(None))).chunk is None


def test_any_one_chunk_field_makes_a_chunk() -> None:
    base = Writer().string(1, "p").uint(2, 1).uint(3, 2)
    assert decode_metadata(base.bytes()).chunk is None
    for number in (26, 27, 28, 29):
        w = Writer().string(1, "p").uint(2, 1).uint(3, 2)
        w.string(number, "u") if number == 26 else w.sint(number, 1)
        assert decode_metadata(w.bytes()).chunk is not None


def test_a_chunk_send_becomes_a_chunk_entry() -> None:
    chunk = ChunkInfo("p-7", 1, 3, 25)
    send = compact_messages(_section(_meta(chunk, partition_key="k"), b"0123456789"))
    assert (send.messages, send.payload_bytes, send.deliver_at_ms, send.chunk) == (1, 10, 0, chunk)
    stored = decode_entry(encode_compact_batch("p", 7, 1000, 1, [send.body], 0, send.chunk))
    (message,) = stored.messages
    assert (message.payload, message.key, message.chunk) == (b"0123456789", "k", chunk)


def _refused(
    meta: MessageMetadata | bytes, payload: bytes = b"0123456789", total_max: int = 1000
) -> SendRefused:
    with pytest.raises(SendRefused) as caught:
        compact_messages(_section(meta, payload), chunked_message_bytes_max=total_max)
    return caught.value


def _raw_chunk(number: int, value: int) -> bytes:
    """Metadata of a valid chunk but for field ``number`` written as ``value`` (any 64-bit pattern)."""
    fields = {26: None, 27: 2, 28: 100, 29: 0}
    w = Writer().string(1, "p").uint(2, 1).uint(3, 2).string(26, "u")
    for field, default in fields.items():
        if field != 26:
            w.uint(field, value if field == number else default)
    return w.bytes()


@pytest.mark.parametrize(
    ("meta", "error", "text"),
    [
        (_meta(ChunkInfo("u", 2, 2, 100)), ServerError.MetadataError, "chunk_id 2 out of range"),
        (_meta(ChunkInfo("u", -5, 2, 100)), ServerError.MetadataError, "chunk_id -5 out of range"),
        (_meta(ChunkInfo("u", 0, -2, 100)), ServerError.MetadataError, "num_chunks_from_msg -2"),
        (_meta(ChunkInfo("u", 0, 2, -1)), ServerError.MetadataError, "total_chunk_msg_size -1"),
        (
            _meta(ChunkInfo("u", 0, 2, 1001)),
            ServerError.MetadataError,
            "total_chunk_msg_size 1001 out of range",
        ),
        (_meta(ChunkInfo("u", 0, 2, 9)), ServerError.MetadataError, "less than this chunk's 10 bytes"),
        (_meta(ChunkInfo("", 0, 2, 100)), ServerError.MetadataError, "chunk uuid of 0 bytes"),
        (_raw_chunk(28, 2**63), ServerError.MetadataError, "does not fit 32 bits"),
        (_raw_chunk(29, 2**64 - 1), ServerError.MetadataError, "chunk_id -1 out of range"),
        (_raw_chunk(27, 2**32), ServerError.MetadataError, "does not fit 32 bits"),
        (_meta(ChunkInfo("u", 0, 2, 100), num_messages_in_batch=1), ServerError.MetadataError, "batch"),
        (
            _meta(ChunkInfo("u", 0, 2, 100), compression=CompressionType.LZ4, uncompressed_size=20),
            ServerError.NotAllowedError,
            "compressed chunked messages",
        ),
    ],
)
def test_forged_chunk_fields_are_refused_by_name(
    meta: MessageMetadata | bytes, error: int, text: str
) -> None:
    refused = _refused(meta)
    assert refused.error == error
    assert text in refused.message


def test_a_uuid_that_is_not_utf8_is_invalid_metadata() -> None:
    w = Writer().string(1, "p").uint(2, 1).uint(3, 2).data(26, b"\xff\xfe").uint(27, 2).uint(28, 100)
    assert _refused(w.bytes()).error == ServerError.MetadataError


def settings(**given: Any) -> BrokerSettings:
    return BrokerSettings.model_validate({"metadata_url": "memory://", **given})


def test_defaults() -> None:
    assert settings().max_message_size == 5 * 1024 * 1024
    assert settings().chunked_message_bytes_max == 64 * 1024 * 1024
    assert settings(max_message_size=16 * 1024).max_message_size == 16 * 1024


HOSTILE = [
    0,
    -1,
    1023,
    2**63,
    "\uff11\uff10\uff10\uff10\uff10\uff10",
    "100000\u202e",
    "1\x0000000",
    "big",
    1.5,
    None,
]


@pytest.mark.parametrize("value", [*HOSTILE, 5 * 1024 * 1024 + 1])
def test_max_message_size_refuses_hostile_values(value: Any) -> None:
    with pytest.raises(pydantic.ValidationError, match="max_message_size"):
        settings(max_message_size=value)


@pytest.mark.parametrize("value", [*HOSTILE, 2**31])
def test_chunked_message_bytes_max_refuses_hostile_values(value: Any) -> None:
    with pytest.raises(pydantic.ValidationError, match="chunked_message_bytes_max"):
        settings(chunked_message_bytes_max=value)


def test_a_standalone_passes_them_to_its_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MAGNETAR_MAX_MESSAGE_SIZE", "262144")
    monkeypatch.setenv("MAGNETAR_CHUNKED_MESSAGE_BYTES_MAX", "1048576")
    standalone = StandaloneSettings.model_validate({"data_dir": tmp_path})
    assert standalone.broker.max_message_size == 262144
    assert standalone.broker.chunked_message_bytes_max == 1048576


@pytest.mark.parametrize("delayed", [False, True])
@pytest.mark.parametrize("chunk", [None, ChunkInfo("prödücer-9", 0, 2, 100)])
@pytest.mark.parametrize("version", [-1, 0, 2**62])
def test_the_entry_size_is_known_before_the_entry_exists(
    delayed: bool, chunk: ChunkInfo | None, version: int
) -> None:
    send = compact_messages(_section(_meta(None, partition_key="k", properties={"a": "b"}), b"payload"))
    deliver_at = 10**12 if delayed else 0
    entry = encode_compact_batch("prödücer", 7, 1000, 1, [send.body], deliver_at, chunk, version)
    size = compact_entry_bytes(
        len(send.body), "prödücer", delayed=delayed, chunk=chunk, versioned=version >= 0
    )
    assert size == len(entry)


def test_the_entry_fields_bound_holds_the_largest_fields() -> None:
    chunk = ChunkInfo("u" * CHUNK_UUID_BYTES_MAX, 0, 2, 100)
    largest = compact_entry_bytes(0, "n" * PRODUCER_NAME_BYTES_MAX, delayed=True, chunk=chunk, versioned=True)
    assert largest <= ENTRY_FIELDS_MAX


@pytest.mark.parametrize("uuid", ["\x00\x01", "id\u202egnp", "a\r\nX-Injected: 1", "ünï-1", "\ufeff"])
def test_a_uuid_of_any_text_is_kept_and_never_breaks_a_peek(uuid: str) -> None:
    chunk = ChunkInfo(uuid, 0, 2, 100)
    send = compact_messages(_section(_meta(chunk), b"0123456789"))
    data = encode_compact_batch("p", 7, 1000, 1, [send.body], 0, send.chunk)
    assert decode_entry(data).messages[0].chunk == chunk
    response = entry_response(Entry(Position(3, 4), data))
    headers = dict(response.headers)
    assert response.status == 200
    assert headers["X-Pulsar-chunk-id"] == "0"
    printable = uuid.isprintable() and all(ord(c) < 256 for c in uuid)
    assert headers.get("X-Pulsar-uuid") == (uuid if printable else None)
    assert "X-Injected" not in headers
