"""Topic names, namespace names and namespace bundles as Pulsar parses and hashes them."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.ownership.namespace_bundle import (
    NamespaceBundle,
    bundle_boundaries,
    bundle_for_hash,
    bundles_of,
    find_bundle,
    topic_hash,
)
from magnetar.broker.wire.errors import InvalidTopicNameError, UnsupportedTopicDomainError
from magnetar.broker.wire.topic_name import (
    NamespaceName,
    TopicDomain,
    TopicName,
    check_subscription_name,
    parse_topic_name,
    partition_index_of,
    url_decode,
    url_encode,
)


@pytest.mark.parametrize(
    ("name", "full"),
    [
        ("my-topic", "persistent://public/default/my-topic"),
        ("tenant/ns/my-topic", "persistent://tenant/ns/my-topic"),
        ("persistent://tenant/ns/my-topic", "persistent://tenant/ns/my-topic"),
        ("persistent://t.a_b=c:d/n-s/topic with spaces", "persistent://t.a_b=c:d/n-s/topic with spaces"),
        ("persistent://t/ns/ünïcödé", "persistent://t/ns/ünïcödé"),
    ],
)
def test_full_and_short_forms(name: str, full: str) -> None:
    topic = parse_topic_name(name)
    assert str(topic) == full
    assert topic.is_persistent
    assert parse_topic_name(full) == topic


@pytest.mark.parametrize(
    "name",
    [
        "a/b",  # two-part short form
        "a/b/c/d",  # short v1 form
        "persistent://t/cluster/ns/topic",  # legacy v1 (cluster-qualified)
        "persistent://t/ns/a/b",  # a slash in the local name reads as v1
        "persistent://t/ns/",  # empty local name
        "persistent://t/ns",
        "persistent:///ns/topic",  # empty tenant
        "persistent://t!/ns/topic",  # NamedEntity: '!' not allowed
        "persistent://t/n s/topic",
        "persistent://tënant/ns/topic",  # Java's \w is ASCII-only
        "kafka://t/ns/topic",
        "",
        "persistent://t/ns/" + "x" * 1025,
        "persistent://t/ns/" + "%" * 683,  # 683 characters, 2049 once URL-encoded
        "persistent://t/ns/\x00nul",  # control characters: C0, DEL, C1
        "persistent://t/ns/a\nb",
        "persistent://t/ns/a\x7fb",
        "persistent://t/ns/a\x85b",
        "persistent://t/ns/a\ud800b",  # a lone surrogate has no UTF-8 form
        "persistent://t/ns/.",  # relative path segments
        "persistent://t/ns/..",
        "persistent://./ns/topic",
        "persistent://t/../topic",
        "persistent://" + "t" * 129 + "/ns/topic",
    ],
)
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        parse_topic_name(name)


def test_a_control_character_is_named_in_the_error() -> None:
    with pytest.raises(InvalidTopicNameError, match="control character U\\+0000"):
        parse_topic_name("persistent://public/default/\x00nul")


@pytest.mark.parametrize(
    "name",
    ["persistent://t/ns/" + "x" * 1024, "persistent://t/ns/" + "%" * 682, "persistent://t/ns/.hidden",
     "persistent://t/ns/a\u200bb", "persistent://" + "t" * 128 + "/ns/topic", "persistent://t/ns/..."],
)  # fmt: skip
def test_names_at_the_bounds_are_accepted(name: str) -> None:
    assert str(parse_topic_name(name)) == name


@pytest.mark.parametrize(
    "name", ["", "a\x00", "\x1b[31m", "a\x9fb", ".", "..", "s" * 1025, "é" * 257, "a\udfff"]
)
def test_invalid_subscription_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        check_subscription_name(name)


@pytest.mark.parametrize("name", ["sub", "s" * 1024, "é" * 256, "a b/c%d", "...", "sub\u2028"])
def test_valid_subscription_names_are_accepted(name: str) -> None:
    check_subscription_name(name)


def test_non_persistent_is_recognised_but_unsupported() -> None:
    with pytest.raises(UnsupportedTopicDomainError, match="non-persistent topics are not supported"):
        parse_topic_name("non-persistent://t/ns/x")
    topic = parse_topic_name("non-persistent://t/ns/x", allow_non_persistent=True)
    assert topic.domain is TopicDomain.NON_PERSISTENT
    assert not topic.is_persistent
    assert topic.managed_ledger_name == "t/ns/non-persistent/x"


def test_url_encoding_is_javas_urlencoder() -> None:
    assert url_encode("a b") == "a+b"
    assert url_encode("a.b-c*d_e") == "a.b-c*d_e"
    assert url_encode("~/%:") == "%7E%2F%25%3A"
    assert url_encode("é") == "%C3%A9"
    assert url_decode("a+b%7e%C3%A9") == "a b~é"
    for bad in ("%", "%4", "%zz", "%C3"):
        with pytest.raises(InvalidTopicNameError):
            url_decode(bad)


@given(st.text(max_size=50))
def test_url_encode_round_trips(text: str) -> None:
    encoded = url_encode(text)
    assert encoded.isascii()
    assert url_decode(encoded) == text


def test_managed_ledger_name_and_rest_path_encode_the_local_name() -> None:
    topic = parse_topic_name("persistent://tenant/ns/my topic:1")
    assert topic.managed_ledger_name == "tenant/ns/persistent/my+topic%3A1"
    assert topic.rest_path == "persistent/tenant/ns/my+topic%3A1"
    assert TopicName.from_managed_ledger_name(topic.managed_ledger_name) == topic
    with pytest.raises(InvalidTopicNameError):
        TopicName.from_managed_ledger_name("tenant/ns/topic")


@pytest.mark.parametrize(
    ("local", "index"),
    [
        ("t-partition-0", 0),
        ("t-partition-12", 12),
        ("a-partition-1-partition-3", 3),
        ("t-partition-01", -1),
        ("t-partition--1", -1),
        ("t-partition-+1", -1),
        ("t-partition-", -1),
        ("t-partition-x", -1),
        ("t-partition-2147483648", -1),
        ("t-partition-2147483647", 2147483647),
        ("-partition-1", -1),
        ("plain", -1),
    ],
)
def test_partition_index_follows_pulsar(local: str, index: int) -> None:
    assert partition_index_of(local) == index


def test_partitions_and_their_base_topic() -> None:
    base = parse_topic_name("t/ns/orders")
    part = base.partition(3)
    assert str(part) == "persistent://t/ns/orders-partition-3"
    assert part.is_partition
    assert part.partition_index == 3
    assert part.partitioned_topic == base
    assert part.partition(3) == part
    assert base.partitioned_topic == base
    assert not base.is_partition
    with pytest.raises(InvalidTopicNameError):
        base.partition(-1)


def test_namespace_names() -> None:
    ns = NamespaceName.parse("public/default")
    assert str(ns) == "public/default"
    assert parse_topic_name("x").namespace_name == ns
    for bad in ("public", "a/b/c", "a/", "/b", "a b/c"):
        with pytest.raises(InvalidTopicNameError):
            NamespaceName.parse(bad)


def test_default_bundles_split_the_ring_evenly() -> None:
    assert bundle_boundaries(4) == [0x00000000, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert bundle_boundaries(1) == [0, 0xFFFFFFFF]
    assert [b.range_name for b in bundles_of(bundle_boundaries(2))] == [
        "0x00000000_0x80000000",
        "0x80000000_0xffffffff",
    ]
    with pytest.raises(ValueError, match="Invalid number of bundles"):
        bundle_boundaries(0)


def test_bundle_lookup_uses_crc32_of_the_full_name() -> None:
    topic = parse_topic_name("persistent://pulsar/ns/topic-1")
    assert topic_hash(topic) == zlib.crc32(b"persistent://pulsar/ns/topic-1")
    bounds = bundle_boundaries(4)
    bundle = find_bundle(topic, bounds)
    assert bundle.contains(topic_hash(topic))
    assert bundle == bundle_for_hash(topic_hash(topic), bounds)


def test_bundle_edges() -> None:
    bounds = bundle_boundaries(4)
    assert bundle_for_hash(0, bounds).range_name == "0x00000000_0x40000000"
    assert bundle_for_hash(0x3FFFFFFF, bounds).range_name == "0x00000000_0x40000000"
    assert bundle_for_hash(0x40000000, bounds).range_name == "0x40000000_0x80000000"
    assert bundle_for_hash(0xFFFFFFFF, bounds).range_name == "0xc0000000_0xffffffff"
    assert NamespaceBundle.parse("0xc0000000_0xffffffff").contains(0xFFFFFFFF)
    assert not NamespaceBundle.parse("0x00000000_0x40000000").contains(0x40000000)
    for bad in ("0x1", "zz_0x2", "0x2_0x1"):
        with pytest.raises(ValueError):
            NamespaceBundle.parse(bad)


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_every_hash_has_exactly_one_bundle(count: int, hash_value: int) -> None:
    bounds = bundle_boundaries(count)
    owners = [b for b in bundles_of(bounds) if b.contains(hash_value)]
    assert owners == [bundle_for_hash(hash_value, bounds)]


def test_partitions_hash_by_their_own_names_and_spread_over_bundles() -> None:
    """As Pulsar: each partition is placed by its own name, so a topic's partitions may have several owners
    (the owner proxy fans a session out to them)."""
    boundaries = bundle_boundaries(64)
    topic = parse_topic_name("persistent://public/default/spread")
    for i in range(16):
        assert topic_hash(topic.partition(i)) == zlib.crc32(
            f"persistent://public/default/spread-partition-{i}".encode()
        )
    bundles = {find_bundle(topic.partition(i), boundaries) for i in range(16)}
    assert len(bundles) > 1
