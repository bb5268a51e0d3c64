"""MessageId: protobuf MessageIdData bytes, base64, admin JSON and positions, with goldens from Pulsar."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.wire.errors import InvalidMessageIdError
from magnetar.broker.wire.message_id import (
    EARLIEST,
    LATEST,
    MessageId,
    decode_base64_java,
    decode_base64_java_checked,
    delivered_message_id,
    encode_message_id,
    format_position,
    parse_position,
    read_varint,
    write_varint,
)


def test_pulsar_goldens() -> None:
    # docs/upstream.md, Pulsar §1.5/§1.11: "CAAQAw==" = 08 00 10 03 = ledger 0, entry 3 (older Pulsar, no
    # batch_size)
    assert MessageId.from_base64("CAAQAw==") == MessageId(0, 3)
    # docs/upstream.md, Pulsar §1.7: "CAMQADAA" = 08 03 10 00 30 00 = ledger 3, entry 0, batch_size 0 (current
    # Pulsar)
    assert MessageId.from_base64("CAMQADAA") == MessageId(3, 0)
    assert MessageId(3, 0).to_base64() == "CAMQADAA"
    assert MessageId(0, 3).to_bytes() == bytes.fromhex("080010033000")


def test_optional_fields_written_as_pulsar_writes_them() -> None:
    assert MessageId(1, 2, partition=2).to_bytes() == bytes.fromhex("08011002180230 00".replace(" ", ""))
    batched = MessageId(1, 2, batch_index=3, batch_size=10)
    assert batched.to_bytes() == bytes.fromhex("080110022003300a")
    assert MessageId.from_bytes(batched.to_bytes()).batch_size == 10
    # ids are Java longs: earliest (-1, -1) is written as 10-byte varints of 2**64 - 1
    assert EARLIEST.to_bytes() == bytes.fromhex("08ffffffffffffffffff0110ffffffffffffffffff013000")
    assert MessageId.from_bytes(EARLIEST.to_bytes()) == EARLIEST
    assert MessageId.from_bytes(LATEST.to_bytes()) == LATEST


def test_negative_int32_is_a_ten_byte_varint() -> None:
    data = bytes.fromhex("08011002") + b"\x20" + bytes.fromhex("feffffffffffffffff01")  # batch_index = -2
    assert MessageId.from_bytes(data).batch_index == -2
    assert MessageId(1, 2, batch_index=-2).to_bytes() == data + b"\x30\x00"


def test_explicit_defaults_and_unknown_fields_are_accepted() -> None:
    # partition=-1 written explicitly, ack_set (5, packed), first_chunk_message_id (7), a fixed32 field 9
    data = (
        bytes.fromhex("08071008")
        + b"\x18"
        + bytes.fromhex("ffffffffffffffffff01")
        + bytes.fromhex("2a020102")
        + bytes.fromhex("3a0408011002")
        + bytes.fromhex("4d01020304")
    )
    assert MessageId.from_bytes(data) == MessageId(7, 8)


@pytest.mark.parametrize(
    "hex_data",
    [
        "",  # no required fields
        "0801",  # entryId missing
        "1001",  # ledgerId missing
        "0880",  # truncated varint
        "08ffffffffffffffffffff01",  # 11-byte varint
        "08ffffffffffffffffff7f",  # > 64 bits
        "080110020b",  # wire type 3 (group)
        "0801100232ff",  # length beyond the data
        "0001",  # field number 0
    ],
)
def test_malformed_bytes_are_refused(hex_data: str) -> None:
    with pytest.raises(InvalidMessageIdError):
        MessageId.from_bytes(bytes.fromhex(hex_data))


@pytest.mark.parametrize("text", ["", "!!!!", "CAAQAw=", "CAAQAw===", "C", "CAAQ Aw==", "CAAQAw==\n"])
def test_malformed_base64_is_refused(text: str) -> None:
    with pytest.raises(InvalidMessageIdError):
        MessageId.from_base64(text)


def test_base64_padding_is_optional_like_javas_decoder() -> None:
    assert MessageId.from_base64("CAAQAw") == MessageId(0, 3)
    assert decode_base64_java("QUI") == b"AB"
    with pytest.raises(ValueError, match="enough valid bits"):
        decode_base64_java("QUJDR")
    assert decode_base64_java("YWJj") == b"abc"
    with pytest.raises(ValueError, match="wrong 4-byte ending unit"):
        decode_base64_java("YWJj====")  # Python's strict mode alone would take it


@given(st.text(alphabet="QUJDYWJj+/=\u00e9 \n-_", max_size=16))
def test_base64_decoding_accepts_and_refuses_what_javas_decoder_does(text: str) -> None:
    """The fast path for whole 4-character units agrees with Java's rules spelled out."""
    try:
        expected: bytes | None = decode_base64_java_checked(text)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            decode_base64_java(text)
    else:
        assert decode_base64_java(text) == expected


@st.composite
def mangled_base64(draw: st.DrawFn) -> str:
    """Base64 of up to 300 bytes (long enough for the SIMD decoder's blocks), then a few characters replaced,
    inserted or removed."""
    text = list(base64.b64encode(draw(st.binary(max_size=300))).decode())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        char = draw(st.sampled_from("A/+=-_ \n\x00\u00e9\u0661."))
        edit = draw(st.sampled_from(["replace", "insert", "remove"]))
        if edit == "insert" or not text:
            text.insert(at, char)
        elif edit == "replace":
            text[min(at, len(text) - 1)] = char
        else:
            del text[min(at, len(text) - 1)]
    return "".join(text)


@given(mangled_base64())
def test_long_base64_is_decoded_as_javas_decoder_does(text: str) -> None:
    """The SIMD decoder's answer, where it gives one, is Java's; the rest goes the checked path."""
    try:
        expected: bytes | None = decode_base64_java_checked(text)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            decode_base64_java(text)
    else:
        assert decode_base64_java(text) == expected


ids = st.builds(
    MessageId,
    ledger_id=st.integers(-(2**63), 2**63 - 1),
    entry_id=st.integers(-(2**63), 2**63 - 1),
    partition=st.integers(-(2**31), 2**31 - 1),
    batch_index=st.integers(-(2**31), 2**31 - 1),
    batch_size=st.integers(0, 2**31 - 1),
)


@given(ids)
def test_round_trips(message_id: MessageId) -> None:
    decoded = MessageId.from_base64(message_id.to_base64())
    # a negative partition is not written, so it reads back as the default -1
    partition = message_id.partition if message_id.partition >= 0 else -1
    assert decoded == MessageId(message_id.ledger_id, message_id.entry_id, partition, message_id.batch_index)
    assert decoded.batch_size == message_id.batch_size
    assert base64.b64decode(message_id.to_base64()) == message_id.to_bytes()


@given(ids, st.integers(-(2**31), 2**31 - 1), st.booleans())
def test_the_hot_path_encoders_and_the_delivered_id_memo_agree_with_the_codec(
    message_id: MessageId, batch_size: int, delivered: bool
) -> None:
    """``encode_message_id`` and ``delivered_message_id`` write exactly ``to_base64``'s text, and an id
    remembered for a consumer decodes from the memo to exactly what the full decoder gives."""
    m = message_id
    fields = (m.ledger_id, m.entry_id, m.partition, m.batch_index, batch_size)
    text = encode_message_id(*fields).decode("ascii")
    if delivered:
        assert delivered_message_id(*fields) == text.encode("ascii")
    full = MessageId(m.ledger_id, m.entry_id, m.partition, m.batch_index, batch_size)
    assert text == full.to_base64()
    expected = MessageId.from_bytes(base64.b64decode(text))
    decoded = MessageId.from_base64(text)
    assert decoded == expected
    assert decoded.batch_size == expected.batch_size
    assert decoded.partition == expected.partition


@given(st.integers(0, 2**64 - 1))
def test_varint_round_trips(value: int) -> None:
    out = bytearray()
    write_varint(out, value)
    assert len(out) <= 10
    assert read_varint(bytes(out), 0) == (value, len(out))


@given(st.binary(max_size=40))
def test_arbitrary_bytes_decode_or_raise_the_typed_error(data: bytes) -> None:
    with contextlib.suppress(InvalidMessageIdError):
        MessageId.from_bytes(data)


def test_admin_json_and_positions() -> None:
    mid = MessageId(97, 9)
    assert mid.to_admin_json() == {"ledgerId": 97, "entryId": 9, "partitionIndex": -1}
    assert MessageId.from_admin_json({"ledgerId": 97, "entryId": 9, "partitionIndex": -1}) == mid
    assert MessageId.from_admin_json({"ledgerId": 1, "entryId": 2, "batchIndex": 4}).batch_index == 4
    for bad in ({"ledgerId": 1}, {"ledgerId": "1", "entryId": 2}, [1, 2], {"ledgerId": True, "entryId": 1}):
        with pytest.raises(InvalidMessageIdError):
            MessageId.from_admin_json(bad)
    assert mid.position == "97:9"
    assert format_position(12, -1) == "12:-1"
    assert parse_position("12:-1") == (12, -1)
    for bad in ("12", "a:b", "1:2:3", " 1:2", "+1:2", "1_0:2"):
        with pytest.raises(InvalidMessageIdError):
            parse_position(bad)
    assert str(MessageId(1, 2, 0)) == "1:2:0"
    assert str(MessageId(1, 2, -1, 5)) == "1:2:-1:5"


def test_identity_and_order_ignore_batch_size() -> None:
    assert MessageId(1, 2, -1, 0, batch_size=5) == MessageId(1, 2, -1, 0, batch_size=9)
    assert MessageId(1, 2) < MessageId(1, 3) < MessageId(2, 0)
    with pytest.raises(InvalidMessageIdError):
        MessageId(2**63, 0)
    with pytest.raises(InvalidMessageIdError):
        MessageId(0, 0, partition=2**31)


def test_plain_acks_of_delivered_ids_skip_parsing_with_the_same_result() -> None:
    from magnetar.broker.protocols.pulsar_ws.messages import (
        CommandType,
        parse_consumer_command,
        plain_ack_fields,
    )

    text = delivered_message_id(12, 34, 2, 5, 10).decode("ascii")
    frame = '{"messageId":"' + text + '"}'
    fields = plain_ack_fields(frame)
    command = parse_consumer_command(frame)
    assert command.type is CommandType.ACK
    assert command.message_id is not None
    m = command.message_id
    assert fields == (m.ledger_id, m.entry_id, m.partition, m.batch_index, m.batch_size) == (12, 34, 2, 5, 10)
    assert plain_ack_fields(encode_message_id(99, 1, -1, -1, 0).decode()) is None  # not a JSON ack
    undelivered = '{"messageId":"' + MessageId(77, 1).to_base64() + '"}'
    assert plain_ack_fields(undelivered) is None  # decoded by the full parser instead
    assert plain_ack_fields('{"messageId": "' + text + '"}') is None  # any other spelling: full parser
    assert plain_ack_fields('{"type":"negativeAcknowledge","messageId":"' + text + '"}') is None
