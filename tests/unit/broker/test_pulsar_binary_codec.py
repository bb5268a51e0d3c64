"""The codec of Pulsar's binary protocol: protobuf wire format, commands, frames and payload sections -
round trips, a stream split anywhere decodes as whole, and hostile sizes refused with a clear error."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.protocols.pulsar_binary.commands import (
    Ack,
    AckType,
    AuthResponse,
    CommandType,
    Connect,
    CreateProducer,
    Flow,
    Ping,
    Send,
    Subscribe,
    SubType,
    UnsupportedCommand,
    decode_command,
)
from magnetar.broker.protocols.pulsar_binary.encoders import (
    AUTH_REFRESH_DATA,
    encode_auth_challenge,
    encode_auth_response,
    encode_connect,
    encode_ping,
    encode_send_receipt,
)
from magnetar.broker.protocols.pulsar_binary.framing import (
    Frame,
    FrameDecoder,
    FrameError,
    PayloadError,
    encode_frame,
    encode_payload_section,
    parse_payload_section,
)
from magnetar.broker.protocols.pulsar_binary.metadata import (
    MessageMetadata,
    SingleMessage,
    decode_batch,
    decode_metadata,
    encode_batch,
    encode_metadata,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import (
    ProtobufError,
    Writer,
    encode_varint,
    parse_message,
    read_varint,
)


def _cmd(kind: CommandType, sub: Writer) -> bytes:
    return Writer().uint(1, kind).data(kind, sub.bytes()).bytes()


def test_ping_is_the_documented_bytes() -> None:
    assert encode_frame(encode_ping()) == bytes.fromhex("0000000900000005081292 0100".replace(" ", ""))


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trip(value: int) -> None:
    data = encode_varint(value)
    assert read_varint(memoryview(data), 0) == (value, len(data))


@pytest.mark.parametrize(
    "data",
    [
        b"\xff" * 11,  # longer than 10 bytes
        b"\xff" * 9 + b"\x7f",  # 2**70-ish: more than 64 bits
        b"\x80\x80",  # truncated
    ],
)
def test_bad_varints_are_refused(data: bytes) -> None:
    with pytest.raises(ProtobufError):
        read_varint(memoryview(data), 0)


@pytest.mark.parametrize("length", [2**31, 2**63, 2**64 - 1, 5])
def test_forged_field_lengths_are_refused_before_allocating(length: int) -> None:
    data = encode_varint(1 << 3 | 2) + encode_varint(length) + b"abc"
    with pytest.raises(ProtobufError, match="claims"):
        parse_message(data, "M")


def test_negative_int32_round_trip_and_groups_refused() -> None:
    f = parse_message(Writer().sint(3, -1).sint(4, -5).bytes(), "M")
    assert f.int32(3) == -1
    assert f.int32(4) == -5
    with pytest.raises(ProtobufError, match="wire type"):
        parse_message(encode_varint(1 << 3 | 3), "M")
    with pytest.raises(ProtobufError, match="field number"):
        parse_message(encode_varint(0 << 3 | 0) + b"\x00", "M")


def test_int32_out_of_range_is_refused() -> None:
    f = parse_message(Writer().uint(2, 2**40).bytes(), "M")
    with pytest.raises(ProtobufError, match="32 bits"):
        f.int32(2)


def test_connect_subscribe_ack_decode() -> None:
    connect = decode_command(encode_connect("Pulsar-CPP-v3", 20, ("token", b"jwt")))
    assert connect == Connect("Pulsar-CPP-v3", 20, "token", b"jwt", None)
    sub = Writer().string(1, "persistent://public/default/t").string(2, "s").uint(3, SubType.Shared)
    sub.uint(4, 7).uint(5, 9).string(6, "c").uint(13, 1)
    decoded = decode_command(_cmd(CommandType.SUBSCRIBE, sub))
    assert isinstance(decoded, Subscribe)
    assert (decoded.sub_type, decoded.consumer_id, decoded.request_id) == (SubType.Shared, 7, 9)
    assert decoded.initial_earliest
    assert decoded.durable
    mid = Writer().uint(1, 3).uint(2, 4).sint(4, 2).bytes()
    ack = decode_command(_cmd(CommandType.ACK, Writer().uint(1, 7).uint(2, 1).data(3, mid).uint(8, 11)))
    assert isinstance(ack, Ack)
    assert ack.ack_type is AckType.Cumulative
    assert ack.request_id == 11
    assert (ack.ids[0].ledger_id, ack.ids[0].entry_id, ack.ids[0].batch_index) == (3, 4, 2)
    flow = decode_command(_cmd(CommandType.FLOW, Writer().uint(1, 7).uint(2, 1000)))
    assert flow == Flow(7, 1000)
    producer = decode_command(_cmd(CommandType.PRODUCER, Writer().string(1, "t").uint(2, 1).uint(3, 2)))
    assert isinstance(producer, CreateProducer)
    assert producer.producer_name is None
    send = decode_command(_cmd(CommandType.SEND, Writer().uint(1, 1).uint(2, 0).uint(3, 10)))
    assert isinstance(send, Send)
    assert send.num_messages == 10
    assert isinstance(decode_command(encode_ping()), Ping)


def test_unsupported_commands_keep_their_request_id() -> None:
    stats = decode_command(_cmd(CommandType.CONSUMER_STATS, Writer().uint(1, 42).uint(4, 3)))
    assert stats == UnsupportedCommand(CommandType.CONSUMER_STATS, 42)
    assert stats.name == "CONSUMER_STATS"
    unknown = decode_command(Writer().uint(1, 45).data(45, b"").bytes())
    assert unknown == UnsupportedCommand(45, None)
    assert unknown.name == "command type 45"


@pytest.mark.parametrize(
    "sub",
    [
        Writer().uint(1, 1).uint(2, 0).sint(3, -1),  # negative num_messages
        Writer().uint(1, 1).uint(2, 0).uint(3, 2**31),  # beyond int32
        Writer().uint(1, 2**63).uint(2, 0),  # producer id beyond a Java long
        Writer().uint(2, 0),  # producer id missing
    ],
)
def test_forged_send_fields_are_refused(sub: Writer) -> None:
    with pytest.raises(ProtobufError):
        decode_command(_cmd(CommandType.SEND, sub))


def test_command_type_without_its_command_is_refused() -> None:
    with pytest.raises(ProtobufError, match="without its command"):
        decode_command(Writer().uint(1, CommandType.SEND).bytes())


_text = st.text(max_size=20)
_props = st.dictionaries(_text, _text, max_size=4)


@given(
    name=_text,
    seq=st.integers(0, 2**63),
    key=st.none() | _text,
    props=_props,
    batch=st.none() | st.integers(0, 100),
    event=st.integers(0, 2**63),
)
def test_metadata_round_trip(
    name: str, seq: int, key: str | None, props: dict[str, str], batch: int | None, event: int
) -> None:
    meta = MessageMetadata(name, seq, 1234, props, key, event, num_messages_in_batch=batch)
    assert decode_metadata(encode_metadata(meta)) == meta


@given(st.lists(st.builds(SingleMessage, st.binary(max_size=50), _props, st.none() | _text), min_size=1))
def test_batch_round_trip(messages: list[SingleMessage]) -> None:
    assert decode_batch(encode_batch(messages), len(messages)) == messages


def test_batch_count_comes_from_the_bytes() -> None:
    data = encode_batch([SingleMessage(b"a"), SingleMessage(b"b")])
    for claimed in (1, 3, 65535):
        with pytest.raises(ProtobufError, match="claims"):
            decode_batch(data, claimed)
    with pytest.raises(ProtobufError):
        decode_batch(data[:-1], 2)
    forged = struct.pack(">I", 2**31) + data[4:]
    with pytest.raises(ProtobufError, match="remain"):
        decode_batch(forged, 2)


def test_payload_section_checksum() -> None:
    meta = encode_metadata(MessageMetadata("p", 0, 1))
    section = encode_payload_section(meta, b"payload")
    parsed = parse_payload_section(section)
    assert parsed.has_checksum
    assert parsed.checksum_ok
    assert (parsed.metadata, parsed.payload) == (meta, b"payload")
    corrupt = section[:-1] + b"X"
    assert not parse_payload_section(corrupt).checksum_ok
    unchecked = parse_payload_section(section[6:])
    assert not unchecked.has_checksum
    assert unchecked.checksum_ok
    body = section[6:]
    assert struct.unpack(">I", section[2:6])[0] == crc32c.crc32c(body)
    for bad in (b"", b"\x0e\x01\x00", struct.pack(">I", 2**31) + b"x", struct.pack(">I", 5) + b"ab"):
        with pytest.raises(PayloadError):
            parse_payload_section(bad)


def _frames() -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    command = st.binary(min_size=1, max_size=40)
    return st.lists(st.tuples(command, st.binary(max_size=60)), min_size=1, max_size=6)


def _decode_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[Frame]:
    out: list[Frame] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        while (frame := decoder.next_frame()) is not None:
            out.append(frame)
    return out


@settings(max_examples=60)
@given(_frames())
def test_split_at_every_byte_boundary_decodes_as_whole(frames: list[tuple[bytes, bytes]]) -> None:
    stream = b"".join(encode_frame(c, r) for c, r in frames)
    whole = _decode_all(FrameDecoder(), [stream])
    assert whole == [Frame(c, r) for c, r in frames]
    for cut in range(len(stream) + 1):
        assert _decode_all(FrameDecoder(), [stream[:cut], stream[cut:]]) == whole
    assert _decode_all(FrameDecoder(), [stream[i : i + 1] for i in range(len(stream))]) == whole


@pytest.mark.parametrize(
    ("head", "match"),
    [
        (struct.pack(">I", 2**31), "more than"),  # "negative" as a Java int
        (struct.pack(">I", 2**32 - 1), "more than"),
        (struct.pack(">I", 3), "cannot hold"),
        (struct.pack(">II", 8, 20), "command of 20 bytes"),
        (struct.pack(">II", 8, 0), "out of range"),
    ],
)
def test_forged_frame_sizes_end_the_stream(head: bytes, match: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(head)
    with pytest.raises(FrameError, match=match):
        decoder.next_frame()
    decoder.receive_data(encode_frame(encode_ping()))
    with pytest.raises(FrameError):  # for good: the stream cannot be re-synchronised
        decoder.next_frame()
    assert decoder.buffered_bytes == 0


def test_truncated_frame_waits_and_holds_only_what_arrived() -> None:
    decoder = FrameDecoder(frame_bytes_max=1024)
    frame = encode_frame(b"\x08\x12", b"x" * 100)
    decoder.receive_data(frame[:50])
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 50
    decoder.receive_data(frame[50:])
    assert decoder.next_frame() == Frame(b"\x08\x12", b"x" * 100)


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_decoders(data: bytes) -> None:
    decoder = FrameDecoder(frame_bytes_max=4096)
    decoder.receive_data(data)
    try:
        while (frame := decoder.next_frame()) is not None:
            with contextlib.suppress(ProtobufError):
                decode_command(frame.command)
            with contextlib.suppress(PayloadError):
                parse_payload_section(frame.rest)
    except FrameError:
        pass
    for parse in (decode_command, decode_metadata):
        with contextlib.suppress(ProtobufError):
            parse(data)
    with contextlib.suppress(ProtobufError):
        decode_batch(data, 3)


def test_auth_response_and_challenge() -> None:
    token = "a.b.c"
    decoded = decode_command(encode_auth_response("token", token.encode(), 21))
    assert decoded == AuthResponse("token", token.encode())
    challenge = parse_message(encode_auth_challenge("token", 21), "BaseCommand")
    assert challenge.uint(1) == CommandType.AUTH_CHALLENGE
    sub = challenge.message(CommandType.AUTH_CHALLENGE, "CommandAuthChallenge")
    assert sub is not None
    data = sub.message(2, "AuthData")
    assert data is not None
    assert (data.optional_string(1), data.bytes_(2), sub.uint(3)) == ("token", AUTH_REFRESH_DATA, 21)


@pytest.mark.parametrize(
    "response",
    [
        Writer().string(1, "raw"),  # no AuthData: no credentials
        Writer().data(2, Writer().data(2, b"x" * 100_000).bytes()),  # no method name, a large token
        Writer().data(2, Writer().string(1, "token\u202e\x00").bytes()),  # control and bidi characters
    ],
)
def test_hostile_auth_responses_decode_to_credentials_the_broker_refuses(response: Writer) -> None:
    command = Writer().uint(1, CommandType.AUTH_RESPONSE).data(CommandType.AUTH_RESPONSE, response.bytes())
    decoded = decode_command(command.bytes())
    assert isinstance(decoded, AuthResponse)
    assert decoded.auth_method_name != "token" or not decoded.auth_data


def test_a_forged_auth_data_is_refused() -> None:
    forged = Writer().data(2, b"\x12\xff\xff\xff\xff\x0f")  # AuthData whose auth_data claims 4 GiB
    command = Writer().uint(1, CommandType.AUTH_RESPONSE).data(CommandType.AUTH_RESPONSE, forged.bytes())
    with pytest.raises(ProtobufError):
        decode_command(command.bytes())


@settings(max_examples=300, deadline=None)
@given(
    ids=st.tuples(*[st.integers(0, 2**64 - 1)] * 5),
)
def test_the_joined_send_receipt_is_the_generic_encoding(ids: tuple[int, int, int, int, int]) -> None:
    producer_id, sequence_id, ledger_id, entry_id, highest = ids
    message_id = Writer().uint(1, ledger_id).uint(2, entry_id).bytes()
    sub = Writer().uint(1, producer_id).uint(2, sequence_id).data(3, message_id).uint(4, highest).bytes()
    generic = Writer().uint(1, CommandType.SEND_RECEIPT).data(CommandType.SEND_RECEIPT, sub).bytes()
    assert encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest) == generic


def test_fields_keep_every_value_of_a_repeated_number_in_order() -> None:
    data = Writer().string(2, "a").uint(1, 5).string(2, "b").uint(1, 6).string(2, "c").bytes()
    fields = parse_message(data, "T")
    assert fields.repeated_strings(2) == ["a", "b", "c"]
    assert fields.uint(1) == 6  # the last value of a singular field wins
    assert fields.repeated_strings(3) == []
