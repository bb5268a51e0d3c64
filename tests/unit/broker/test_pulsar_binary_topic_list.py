"""GET_TOPICS_OF_NAMESPACE, sans-IO: the request's decoding, Pulsar's hash of a topic list, pattern filtering
(RE2, partitions matched by their topic's name) and the answer's fields."""

from __future__ import annotations

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.protocols.pulsar_binary.commands import CommandType, decode_command
from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, ProtobufError, Writer, parse_message
from magnetar.broker.protocols.pulsar_binary.topic_list import (
    GetTopics,
    encode_topics_answer,
    filter_topics,
    topics_hash,
)

TOPICS = [
    "persistent://public/default/prefix-a",
    "persistent://public/default/prefix-b-partition-0",
    "persistent://public/default/prefix-b-partition-1",
    "persistent://public/default/other",
    "non-persistent://public/default/prefix-np",
]


def _request(sub: Writer) -> bytes:
    return Writer().uint(1, CommandType.GET_TOPICS_OF_NAMESPACE).data(32, sub.bytes()).bytes()


def _answer(data: bytes) -> Fields:
    base = parse_message(data, "BaseCommand")
    assert base.required_uint(1) == 33
    sub = base.message(33, "CommandGetTopicsOfNamespaceResponse")
    assert sub is not None
    return sub


def _names(fields: Fields) -> list[str]:
    return fields.repeated_strings(2)


def test_the_request_decodes_with_its_defaults() -> None:
    command = decode_command(_request(Writer().uint(1, 7).string(2, "public/default")))
    assert command == GetTopics(7, "public/default", 0, None, None)
    full = _request(
        Writer().uint(1, 8).string(2, "t/n").uint(3, 2).string(4, "persistent://t/n/x.*").string(5, "abcd")
    )
    assert decode_command(full) == GetTopics(8, "t/n", 2, "persistent://t/n/x.*", "abcd")


@pytest.mark.parametrize(
    "sub",
    [
        Writer().string(2, "public/default"),  # no request id
        Writer().uint(1, 2**63).string(2, "public/default"),  # a request id beyond a Java long
        Writer().uint(1, 1),  # no namespace
        Writer().uint(1, 1).data(2, b"\xff\xfe"),  # a namespace that is not UTF-8
    ],
)
def test_malformed_requests_are_refused(sub: Writer) -> None:
    with pytest.raises(ProtobufError):
        decode_command(_request(sub))


def test_the_hash_is_pulsars() -> None:
    # CRC-32C of the sorted names joined by ",", its four bytes little-endian in hex (Guava's HashCode text)
    names = ["persistent://t/n/b", "persistent://t/n/a"]
    expected = crc32c.crc32c(b"persistent://t/n/a,persistent://t/n/b").to_bytes(4, "little").hex()
    assert topics_hash(names) == expected == topics_hash(list(reversed(names)))
    assert topics_hash([]) == "00000000"
    # Guava writes HashCode.fromInt(0xabcd) as "cdab0000": the low byte first
    assert topics_hash(["a"]) == bytes(reversed(crc32c.crc32c(b"a").to_bytes(4, "big"))).hex()


def test_a_pattern_filters_by_the_topic_name_of_each_partition() -> None:
    matched = filter_topics(TOPICS, "persistent://public/default/prefix-.*")
    assert matched == [
        "persistent://public/default/prefix-a",
        "persistent://public/default/prefix-b-partition-0",
        "persistent://public/default/prefix-b-partition-1",
        "non-persistent://public/default/prefix-np",
    ]
    assert filter_topics(TOPICS, "public/default/prefix-b") == TOPICS[1:3]  # the whole name must match
    assert filter_topics(TOPICS, "public/default/prefix") == []


@pytest.mark.parametrize(
    "pattern",
    [
        "public/default/" + "x" * 40,  # longer than 50 characters: left to the client
        r"public/default/(a)\1",  # a back-reference: not RE2
        "public/default/(?=a)",  # look-ahead: not RE2
        "public/default/[",  # not a pattern at all
    ],
)
def test_patterns_the_broker_does_not_apply(pattern: str) -> None:
    assert filter_topics(TOPICS, pattern) is None


def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    # A backtracking engine would not finish this in a lifetime (the test would hit its timeout).
    names = [f"persistent://public/default/{'a' * 5000}!"] * 20
    assert filter_topics(names, "public/default/(a+)+$") == []


def test_the_answer_carries_names_hash_and_flags() -> None:
    command = GetTopics(5, "public/default", 0, "persistent://public/default/prefix-.*", None)
    fields = _answer(encode_topics_answer(command, TOPICS[:4]))
    assert fields.uint(1) == 5
    assert _names(fields) == TOPICS[:3]
    assert fields.boolean(3)  # filtered
    assert fields.string(4) == topics_hash(TOPICS[:3])
    assert fields.boolean(5)  # changed
    same = GetTopics(6, "public/default", 0, command.pattern, topics_hash(TOPICS[:3]))
    unchanged = _answer(encode_topics_answer(same, TOPICS[:4]))
    assert _names(unchanged) == []
    assert not unchanged.boolean(5, True)
    assert unchanged.string(4) == topics_hash(TOPICS[:3])
    plain = _answer(encode_topics_answer(GetTopics(7, "public/default", 0, None, "stale"), TOPICS[:4]))
    assert _names(plain) == TOPICS[:4]
    assert not plain.boolean(3, True)


@given(st.lists(st.text(min_size=1, max_size=30), max_size=20), st.text(max_size=60))
def test_any_pattern_and_names_give_an_answer(names: list[str], pattern: str) -> None:
    fields = _answer(encode_topics_answer(GetTopics(1, "t/n", 0, pattern, None), names))
    assert set(_names(fields)) <= set(names)
