"""Pulsar's batch wire form (``SingleMessageMetadata`` + payload per message), checked against the .proto.

The expected bytes are written out by hand from ``PulsarApi.proto`` (proto2: a field's key is
``number << 3 | wire type``, varints base-128 little-endian groups, strings and messages length-delimited),
and a small decoder written here from the same definitions - independent of the module's own - reads what
the encoder makes, field by field.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.pulsar_batch import (
    BatchFormatError,
    SingleMessage,
    decode_batch,
    encode_batch,
    encode_single_message_metadata,
)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def proto_fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """``(field number, value)`` pairs of a protobuf message (varint and length-delimited fields only)."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            size, pos = read_varint(data, pos)
            out.append((number, data[pos : pos + size]))
            pos += size
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def as_pulsar_reads_it(metadata: bytes) -> dict[str, object]:
    """``SingleMessageMetadata`` by its .proto field names (properties as a dict of KeyValue)."""
    names = {2: "partition_key", 3: "payload_size", 5: "event_time", 8: "sequence_id"}
    result: dict[str, object] = {"properties": {}}
    for number, value in proto_fields(metadata):
        if number == 1:
            assert isinstance(value, bytes)
            pair = dict(proto_fields(value))
            result["properties"][pair[1].decode()] = pair[2].decode()  # type: ignore[index, union-attr]
        elif number == 2:
            assert isinstance(value, bytes)
            result[names[number]] = value.decode()
        else:
            result[names[number]] = value
    return result


def test_known_bytes_of_one_message() -> None:
    message = SingleMessage(b"xy", {"a": "b"}, partition_key="k", sequence_id=5, event_time_ms=300)
    expected = (
        b"\x0a\x06" + b"\x0a\x01a" + b"\x12\x01b"  # properties = 1: KeyValue{key = 1, value = 2}
        + b"\x12\x01k"  # partition_key = 2
        + b"\x18\x02"  # payload_size = 3
        + b"\x28\xac\x02"  # event_time = 5: 300 as a varint
        + b"\x40\x05"  # sequence_id = 8
    )  # fmt: skip
    assert encode_single_message_metadata(message) == expected
    assert encode_batch([message]) == struct.pack(">I", len(expected)) + expected + b"xy"


def test_a_message_without_optional_fields_has_only_its_payload_size() -> None:
    assert encode_single_message_metadata(SingleMessage(b"")) == b"\x18\x00"
    assert encode_single_message_metadata(SingleMessage(b"z" * 300)) == b"\x18\xac\x02"


def test_the_batch_is_cut_as_pulsars_client_cuts_it() -> None:
    """``Commands.deSerializeSingleMessageInBatch``: a big-endian u32 metadata size, the metadata, then
    ``payload_size`` bytes - repeated ``X-Pulsar-num-batch-message`` times."""
    messages = [SingleMessage(b"first", {"i": "0"}), SingleMessage(b"", {}, partition_key="kk")]
    data = encode_batch(messages)
    pos = 0
    seen = []
    for _ in messages:
        (size,) = struct.unpack_from(">I", data, pos)
        metadata = as_pulsar_reads_it(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
        payload = data[pos : pos + int(metadata["payload_size"])]  # type: ignore[call-overload]
        pos += len(payload)
        seen.append((metadata, payload))
    assert pos == len(data)
    assert seen == [
        ({"properties": {"i": "0"}, "payload_size": 5}, b"first"),
        ({"properties": {}, "partition_key": "kk", "payload_size": 0}, b""),
    ]


texts = st.text(max_size=20)
messages = st.builds(
    SingleMessage,
    payload=st.binary(max_size=64),
    properties=st.dictionaries(texts, texts, max_size=4),
    partition_key=st.none() | texts,
    event_time_ms=st.integers(0, 2**63 - 1),
    sequence_id=st.none() | st.integers(0, 2**63 - 1),
)


@given(st.lists(messages, max_size=6))
def test_round_trip_and_the_independent_reader_agree(batch: list[SingleMessage]) -> None:
    data = encode_batch(batch)
    assert decode_batch(data, len(batch)) == batch
    pos = 0
    for message in batch:
        (size,) = struct.unpack_from(">I", data, pos)
        fields = as_pulsar_reads_it(data[pos + 4 : pos + 4 + size])
        assert fields["properties"] == dict(message.properties)
        assert fields.get("partition_key") == message.partition_key
        assert fields["payload_size"] == len(message.payload)
        assert fields.get("sequence_id") == message.sequence_id
        assert fields.get("event_time", 0) == message.event_time_ms
        pos += 4 + size + len(message.payload)


def test_unknown_fields_are_skipped_by_wire_type() -> None:
    metadata = b"\x18\x01" + b"\x58\x07" + b"\x62\x02ab" + b"\x69" + bytes(8) + b"\x75" + bytes(4)
    data = struct.pack(">I", len(metadata)) + metadata + b"p"
    assert decode_batch(data, 1) == [SingleMessage(b"p")]


@pytest.mark.parametrize(
    ("data", "count", "reason"),
    [
        (b"", 1, "ends before its metadata length"),
        (struct.pack(">I", 9) + b"\x18\x01", 1, "runs past the end"),
        (struct.pack(">I", 2) + b"\x18\x05" + b"ab", 1, "payload of 5 bytes"),
        (struct.pack(">I", 0), 1, "payload_size is missing"),
        (struct.pack(">I", 2) + b"\x18\x00" + b"extra", 1, "left after"),
        (struct.pack(">I", 3) + b"\x0a\x01\x0a", 1, "truncated varint"),
        (struct.pack(">I", 3) + b"\x0a\x05\x0a", 1, "field of 5 bytes runs past the end"),
        (struct.pack(">I", 4) + b"\x0a\x02\x0a\x00", 1, "lacks its key or value"),
        (struct.pack(">I", 11) + b"\x18" + b"\xff" * 10, 1, "longer than 10 bytes"),
        (struct.pack(">I", 2) + b"\x1b\x00", 1, "wire type 3"),
        (b"", -1, "a batch of -1 messages"),
    ],
)
def test_malformed_batches_are_refused_with_a_reason(data: bytes, count: int, reason: str) -> None:
    with pytest.raises(BatchFormatError, match=reason):
        decode_batch(data, count)
