"""Options and offsets of the Spark source: every bad input names the option it came from."""

from __future__ import annotations

import json

import pytest

from magnetar.admin.spark.offsets import (
    EARLIEST,
    OffsetError,
    OffsetSpec,
    from_offset,
    parse_offset_spec,
    to_offset,
)
from magnetar.admin.spark.options import (
    MagnetarOptionError,
    check_batch_options,
    check_stream_options,
    parse_options,
)
from magnetar.broker.wire.topic_name import parse_topic_name

BASE = {"serviceUrl": "http://127.0.0.1:8080", "topic": "orders"}


def test_defaults_and_case_insensitive_names() -> None:
    options = parse_options({"SERVICEURL": "http://h:1/", "Topic": "t/ns/orders"})
    assert options.service_url == "http://h:1"
    assert options.topics == (parse_topic_name("persistent://t/ns/orders"),)
    assert options.pattern is None
    assert (options.starting_offsets, options.ending_offsets, options.max_entries_per_trigger) == (None,) * 3
    assert options.fail_on_data_loss is True
    assert options.subscription_prefix is None
    assert (options.max_entries_per_partition, options.request_timeout_ms) == (50_000, 60_000)
    assert options.max_bytes_per_partition == 32 * 1024 * 1024


def test_every_option_parses() -> None:
    options = parse_options({
        **BASE,
        "startingOffsets": '{"orders-partition-1": {"ledgerId": 3, "entryId": 9}}',
        "endingOffsets": "latest",
        "maxEntriesPerTrigger": "100",
        "failOnDataLoss": "FALSE",
        "subscriptionPrefix": "q1",
        "maxEntriesPerPartition": "7",
        "maxBytesPerPartition": "4096",
        "requestTimeoutMs": "1500",
    })  # fmt: skip
    assert options.starting_offsets == OffsetSpec(
        "earliest", (("persistent://public/default/orders-partition-1", (3, 9)),)
    )
    assert options.ending_offsets == OffsetSpec("latest")
    assert (options.max_entries_per_trigger, options.fail_on_data_loss) == (100, False)
    assert (options.subscription_prefix, options.max_entries_per_partition) == ("q1", 7)
    assert options.max_bytes_per_partition == 4096
    assert options.request_timeout_s == 1.5


def test_topics_and_patterns() -> None:
    options = parse_options({"serviceUrl": "http://h:1", "topics": "a, t/ns/b,,a"})
    assert [str(t) for t in options.topics] == ["persistent://public/default/a", "persistent://t/ns/b"]
    pattern = parse_options(
        {"serviceUrl": "http://h:1", "topicsPattern": r"persistent://t/ns/orders-\d+"}
    ).pattern
    assert pattern is not None
    assert (pattern.tenant, pattern.namespace) == ("t", "ns")
    assert pattern.matches("persistent://t/ns/orders-12")
    assert not pattern.matches("persistent://t/ns/orders-12x")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**BASE, "topicz": "x"}, "unknown option 'topicz'"),
        ({"topic": "x"}, "option 'serviceUrl' is required"),
        ({**BASE, "serviceUrl": "pulsar://h:6650"}, "option 'serviceUrl' must be http(s)://host:port"),
        ({**BASE, "serviceUrl": "http://h:port"}, "option 'serviceUrl' must be"),
        ({**BASE, "serviceUrl": "http://h:1/admin"}, "option 'serviceUrl' must be"),
        (
            {"serviceUrl": "http://h:1"},
            "exactly one of 'topic', 'topics' or 'topicsPattern' must be given, got none",
        ),
        ({**BASE, "topics": "a,b"}, "got topic, topics"),
        ({**BASE, "topic": "a,b"}, "option 'topic' takes one topic"),
        ({**BASE, "topic": "a/b"}, "option 'topic': Invalid short topic name"),
        ({"serviceUrl": "http://h:1", "topics": " , "}, "option 'topics' names no topic"),
        ({"serviceUrl": "http://h:1", "topicsPattern": "orders.*"}, "must start with persistent://"),
        ({"serviceUrl": "http://h:1", "topicsPattern": "persistent://t/ns/(("}, "not a valid regex"),
        ({**BASE, "startingOffsets": "{bad"}, "option 'startingOffsets': expected earliest, latest or JSON"),
        ({**BASE, "startingOffsets": "[]"}, "option 'startingOffsets': the JSON must be an object"),
        ({**BASE, "endingOffsets": '{"a/b": "latest"}'}, "option 'endingOffsets': 'a/b' is not a topic"),
        ({**BASE, "startingOffsets": '{"x": {"ledgerId": 1}}'}, "offset of 'x': expected"),
        ({**BASE, "startingOffsets": '{"x": [1, -2]}'}, "entryId must be an integer from -1"),
        ({**BASE, "startingOffsets": '{"x": [-1, 5]}'}, "ledgerId -1 (earliest) needs entryId -1"),
        ({**BASE, "startingOffsets": '{"x": "newest"}'}, "offset of 'x'"),
        ({**BASE, "maxEntriesPerTrigger": "0"}, "option 'maxEntriesPerTrigger' must be a positive integer"),
        ({**BASE, "maxEntriesPerPartition": "1e3"}, "option 'maxEntriesPerPartition' must be a positive"),
        ({**BASE, "failOnDataLoss": "yes"}, "option 'failOnDataLoss' must be true or false"),
        ({**BASE, "subscriptionPrefix": "a/b"}, "option 'subscriptionPrefix' must be"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(MagnetarOptionError) as raised:
        parse_options(options)
    assert message in str(raised.value)


def test_mode_specific_options() -> None:
    with pytest.raises(MagnetarOptionError, match="'endingOffsets' is not valid in streaming queries"):
        check_stream_options(parse_options({**BASE, "endingOffsets": "latest"}))
    with pytest.raises(MagnetarOptionError, match="'maxEntriesPerTrigger' is only valid in streaming"):
        check_batch_options(parse_options({**BASE, "maxEntriesPerTrigger": "5"}))
    check_stream_options(parse_options({**BASE, "maxEntriesPerTrigger": "5"}))
    check_batch_options(parse_options({**BASE, "endingOffsets": "latest"}))


def test_offset_specs() -> None:
    assert parse_offset_spec(" Earliest ") == OffsetSpec("earliest")
    spec = parse_offset_spec(
        '{"t/ns/a-partition-0": [4, 5], "b": "latest", "c": {"ledgerId": -1, "entryId": -1}}'
    )
    assert spec.for_partition("persistent://t/ns/a-partition-0") == (4, 5)
    assert spec.for_partition("persistent://public/default/b") == "latest"
    assert spec.for_partition("persistent://public/default/c") == EARLIEST
    assert spec.for_partition("persistent://public/default/other") == "earliest"
    assert parse_offset_spec('{"b": "earliest"}', "latest").for_partition("persistent://x/y/z") == "latest"


def test_offsets_are_canonical_json() -> None:
    positions = {"persistent://p/d/b": (7, 1), "persistent://p/d/a": EARLIEST}
    offset = to_offset(positions)
    assert json.dumps(offset) == (
        '{"persistent://p/d/a": {"entryId": -1, "ledgerId": -1}, '
        '"persistent://p/d/b": {"entryId": 1, "ledgerId": 7}}'
    )
    assert json.dumps(offset) == json.dumps(offset, sort_keys=True)
    assert from_offset(json.loads(json.dumps(offset))) == positions
    with pytest.raises(OffsetError):
        from_offset(["x"])
    with pytest.raises(OffsetError):
        from_offset({"a": {"ledgerId": 1, "entryId": True}})
    with pytest.raises(OffsetError):
        from_offset({"a": {"ledgerId": 1, "entryId": 2, "batchIndex": 0}})
