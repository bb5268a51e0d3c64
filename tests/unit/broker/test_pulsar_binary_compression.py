"""Compressed SEND payloads (Pulsar's LZ4 block, zlib stream, zstd frame, raw snappy): decompressed exactly,
bounded, and every lie about them refused with a message naming it."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

import cramjam
import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.protocols.pulsar_binary.commands import (
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.compression import Codec, DecompressionFailed, decompress
from magnetar.broker.protocols.pulsar_binary.connection import SendRefused, compact_messages
from magnetar.broker.protocols.pulsar_binary.framing import PayloadSection
from magnetar.broker.protocols.pulsar_binary.metadata import (
    MessageMetadata,
    SingleMessage,
    encode_batch,
    encode_metadata,
)
from magnetar.broker.wire.entry_format import decode_entry, encode_compact_batch

LIMIT = 5 * 1024 * 1024

COMPRESS: dict[Codec, Callable[[bytes], bytes]] = {
    Codec.LZ4: lambda data: lz4.block.compress(data, store_size=False),
    Codec.ZLIB: zlib.compress,
    Codec.ZSTD: lambda data: bytes(cramjam.zstd.compress(data)),
    Codec.SNAPPY: lambda data: bytes(cramjam.snappy.compress_raw(data)),
}
CODECS = list(COMPRESS)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=4096))
def test_every_codec_round_trips_exactly(codec: Codec, data: bytes) -> None:
    assert decompress(codec, COMPRESS[codec](data), len(data), LIMIT) == data


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_is_refused_without_allocating_what_it_claims(codec: Codec) -> None:
    bomb = COMPRESS[codec](b"\0" * (LIMIT + 1))
    with pytest.raises(DecompressionFailed, match="more than the maximum message size"):
        decompress(codec, bomb, LIMIT + 1, LIMIT)
    with pytest.raises(DecompressionFailed, match=codec.name):  # it lies about its size: stops at the bound
        decompress(codec, bomb, 1000, LIMIT)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_wrong_uncompressed_size_is_refused(codec: Codec, delta: int) -> None:
    data = os.urandom(100) + b"x" * 1000
    with pytest.raises(DecompressionFailed, match=f"{codec.name} payload"):
        decompress(codec, COMPRESS[codec](data), len(data) + delta, LIMIT)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 50, 2**32 - 1])
def test_garbage_and_trailing_bytes_are_refused(codec: Codec, size: int) -> None:
    with pytest.raises(DecompressionFailed, match=codec.name):
        decompress(codec, os.urandom(64), size, LIMIT)
    with pytest.raises(DecompressionFailed, match=codec.name):
        decompress(codec, COMPRESS[codec](b"hello") + b"junk", 5, LIMIT)


@pytest.mark.parametrize("number", [5, 99, 2**32 - 1])
def test_an_unknown_codec_is_named(number: int) -> None:
    with pytest.raises(DecompressionFailed, match=f"unknown compression type {number}") as info:
        decompress(number, b"abc", 3, LIMIT)
    assert info.value.unknown_codec


def _section(meta: MessageMetadata, payload: bytes) -> PayloadSection:
    return PayloadSection(encode_metadata(meta), payload, has_checksum=True, checksum_ok=True)


@pytest.mark.parametrize("codec", CODECS)
def test_a_compressed_batch_is_stored_uncompressed(codec: Codec) -> None:
    singles = [SingleMessage(f"m{i}".encode() * 50, {"i": str(i)}, f"k{i}", 1000 + i) for i in range(20)]
    batch = encode_batch(singles)
    meta = MessageMetadata(
        "p", 0, 1, compression=codec, uncompressed_size=len(batch), num_messages_in_batch=len(singles)
    )
    body, count, payload_bytes, _, _ = compact_messages(_section(meta, COMPRESS[codec](batch)))
    assert count == 20
    assert payload_bytes == sum(len(s.payload) for s in singles)
    stored = decode_entry(encode_compact_batch("p", 0, 1, count, [body])).messages
    assert [(m.payload, m.key, dict(m.properties), m.event_time_ms) for m in stored] == [
        (s.payload, s.partition_key, dict(s.properties), s.event_time_ms) for s in singles
    ]


def test_compressed_sends_that_lie_get_pulsars_errors() -> None:
    data = b"y" * 1000
    lying = MessageMetadata("p", 0, 1, compression=Codec.ZSTD, uncompressed_size=10)
    with pytest.raises(SendRefused, match="ZSTD payload") as info:
        compact_messages(_section(lying, COMPRESS[Codec.ZSTD](data)))
    assert info.value.error is ServerError.MetadataError
    unknown = MessageMetadata("p", 0, 1, compression=7, uncompressed_size=3)
    with pytest.raises(SendRefused, match="unknown compression type 7") as info:
        compact_messages(_section(unknown, b"abc"))
    assert info.value.error is ServerError.NotAllowedError
    # a batch whose decompressed bytes do not hold the messages it claims
    batch = MessageMetadata(
        "p", 0, 1, compression=Codec.LZ4, uncompressed_size=len(data), num_messages_in_batch=2
    )
    with pytest.raises(SendRefused, match="Invalid batch") as info:
        compact_messages(_section(batch, COMPRESS[Codec.LZ4](data)))
    assert info.value.error is ServerError.MetadataError
