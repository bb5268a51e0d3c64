"""Decompressing a producer's compressed SEND payload, bounded, before it is stored.

Pulsar's producers may compress a message's payload (or a whole client batch) with one of four codecs, named
by ``MessageMetadata.compression``; ``uncompressed_size`` carries the size before compression. The formats
are those of Pulsar's own codecs (``CompressionCodecLZ4``/``ZLib``/``ZStd``/``Snappy`` in its Java client,
the same in the C++ one):

* LZ4 - one raw LZ4 *block*, without a size prefix or frame (the reader must know the size);
* ZLIB - a zlib stream (deflate with the two-byte header and the Adler-32 trailer);
* ZSTD - one Zstandard frame;
* SNAPPY - raw Snappy (not the framing format): a varint of the uncompressed length, then the data.

Theory of operation: Magnetar decompresses at the edge and stores its own, uncompressed entry format, so every
reader (WebSocket consumers, the Spark source, binary consumers) reads the messages without knowing codecs.
The client's ``uncompressed_size`` is never trusted to allocate: it must first be at most ``limit`` (the
broker's maximum message size), and decompression writes into at most ``uncompressed_size + 1`` bytes, so a
payload that expands further (a decompression bomb) fails as soon as the bound is reached and never uses
more memory than the bound. The actual output must then equal ``uncompressed_size`` exactly; anything else
- a size that lies in either direction, bytes that are not the codec's format, trailing bytes after the
stream, an unknown codec number - is a :class:`DecompressionFailed` naming the codec and the fault, which
the adapter answers with a SEND_ERROR.
"""

from __future__ import annotations

import enum
import zlib

import cramjam
import lz4.block


class Codec(enum.IntEnum):
    """Pulsar's ``CompressionType``."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


class DecompressionFailed(ValueError):
    """A compressed payload Magnetar does not store: the message names the codec and the fault.
    ``unknown_codec`` is set when the codec number itself is not one of Pulsar's."""

    def __init__(self, message: str, *, unknown_codec: bool = False) -> None:
        super().__init__(message)
        self.unknown_codec = unknown_codec


def codec_name(number: int) -> str:
    try:
        return Codec(number).name
    except ValueError:
        return f"compression type {number}"


def decompress(codec: int, data: bytes, uncompressed_size: int, limit: int) -> bytes:
    """``data`` decompressed with ``codec``: exactly ``uncompressed_size`` bytes, at most ``limit``
    (see the module docstring); :class:`DecompressionFailed` otherwise."""
    try:
        kind = Codec(codec)
    except ValueError:
        raise DecompressionFailed(
            f"unknown compression type {codec} (Pulsar's are 0-4)", unknown_codec=True
        ) from None
    if kind is Codec.NONE:
        return data
    if not 0 <= uncompressed_size <= limit:
        raise DecompressionFailed(
            f"{kind.name} payload: uncompressed_size {uncompressed_size} is more than the maximum message "
            f"size {limit}"
        )
    try:
        out = _DECODERS[kind](data, uncompressed_size)
    except (cramjam.DecompressionError, lz4.block.LZ4BlockError, zlib.error, ValueError) as exc:
        raise DecompressionFailed(
            f"{kind.name} payload does not decompress to its uncompressed_size {uncompressed_size}: {exc}"
        ) from None
    if len(out) != uncompressed_size:
        found = f"more than {uncompressed_size}" if len(out) > uncompressed_size else str(len(out))
        raise DecompressionFailed(
            f"{kind.name} payload decompresses to {found} bytes, "
            f"its uncompressed_size says {uncompressed_size}"
        )
    return out


def _lz4(data: bytes, size: int) -> bytes:
    # A raw block decoded into a buffer of size + 1: the library returns what was actually written.
    out: bytes = lz4.block.decompress(data, uncompressed_size=size + 1)
    return out


def _zlib(data: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, size + 1)
    if len(out) > size:
        return out  # reported as "more" by the caller
    if not inflater.eof:
        raise ValueError("the zlib stream is truncated")
    if inflater.unused_data:
        raise ValueError(f"{len(inflater.unused_data)} bytes after the zlib stream")
    return out


def _zstd(data: bytes, size: int) -> bytes:
    buffer = bytearray(size + 1)
    written = cramjam.zstd.decompress_into(data, buffer)
    return bytes(memoryview(buffer)[:written])


def _snappy(data: bytes, size: int) -> bytes:
    claimed = cramjam.snappy.decompress_raw_len(data)
    if claimed != size:
        raise ValueError(f"the snappy header says {claimed} bytes")
    buffer = bytearray(size)
    written = cramjam.snappy.decompress_raw_into(data, buffer)
    return bytes(memoryview(buffer)[:written])


_DECODERS = {Codec.LZ4: _lz4, Codec.ZLIB: _zlib, Codec.ZSTD: _zstd, Codec.SNAPPY: _snappy}
