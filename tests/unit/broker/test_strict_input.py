"""The one strict reading of numbers and names (``broker.wire.strict_input``), with hostile input."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.protocols.pulsar_ws.messages import parse_consumer_command
from magnetar.broker.protocols.ws_errors import WsSessionError
from magnetar.broker.wire.strict_input import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    NumberFormatError,
    UnsafeNameError,
    check_name_characters,
    parse_int,
    parse_long,
    unsafe_character,
)

BIDI_FORMATS = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


@pytest.mark.parametrize(
    "text",
    [
        "1_0", "\u0661\u0660", "\uff11\uff10", " 10", "10 ", "\t10", "10\n", "", "+", "-", "--1", "+-1",
        "0x10", "1e3", "10.0", "1,000", "\u00b2", "9223372036854775808", "-9223372036854775809",
        str(2**64), "\u0660", "\U0001d7ce",  # mathematical bold zero
    ],
)  # fmt: skip
def test_what_python_reads_and_java_does_not_is_refused(text: str) -> None:
    with pytest.raises(NumberFormatError) as refused:
        parse_long("count", text)
    assert str(refused.value).startswith('Invalid count "')


def test_the_message_names_the_parameter_and_shows_the_value_escaped() -> None:
    with pytest.raises(NumberFormatError, match=r'^Invalid n "\\u0661\\u0660": not a decimal integer'):
        parse_long("n", "\u0661\u0660")
    with pytest.raises(NumberFormatError, match=r'Invalid n "9223372036854775808": out of the range of a 64'):
        parse_long("n", "9223372036854775808")
    with pytest.raises(NumberFormatError, match=r'Invalid n "-1": must be at least 0'):
        parse_long("n", "-1", low=0)
    with pytest.raises(NumberFormatError, match=r'Invalid n "2147483648": must be between'):
        parse_int("n", "2147483648")
    long_text = "9" * 500
    with pytest.raises(NumberFormatError) as refused:
        parse_long("n", long_text)
    assert len(str(refused.value)) < 120  # the value is shortened


def test_java_longs_are_read() -> None:
    assert parse_long("x", "-9223372036854775808") == INT64_MIN
    assert parse_long("x", "+9223372036854775807") == INT64_MAX
    assert parse_long("x", "007") == 7
    assert parse_long("x", "-0") == 0
    assert parse_int("x", str(INT32_MAX)) == INT32_MAX


@settings(max_examples=500)
@given(st.integers(INT64_MIN, INT64_MAX), st.sampled_from(["", "+", "0", "00"]))
def test_every_long_in_its_decimal_forms_round_trips(value: int, prefix: str) -> None:
    text = str(value) if value < 0 else prefix + str(value)
    assert parse_long("x", text) == value


@settings(max_examples=1000)
@given(st.text(max_size=25))
def test_any_text_is_read_only_when_it_is_ascii_sign_and_digits_in_range(text: str) -> None:
    java = re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII) is not None and INT64_MIN <= int(text) <= INT64_MAX
    try:
        value = parse_long("x", text)
    except NumberFormatError:
        assert not java
    else:
        assert java
        assert value == int(text)


@settings(max_examples=300)
@given(st.text(alphabet="0123456789_ +-\u0661\uff11\t", max_size=12))
def test_digits_with_separators_spaces_and_foreign_digits(text: str) -> None:
    accepted = True
    try:
        parse_long("x", text)
    except NumberFormatError:
        accepted = False
    assert accepted == bool(re.fullmatch(r"[+-]?[0-9]{1,18}", text))


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cs") or ord(char) in BIDI_FORMATS


def test_every_control_and_bidi_character_is_named() -> None:
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0), *BIDI_FORMATS]:
        name = f"sub{chr(code)}x"
        with pytest.raises(UnsafeNameError, match=f"U\\+{code:04X}"):
            check_name_characters("subscription", name)
    with pytest.raises(UnsafeNameError, match="the bidirectional formatting character U\\+202E"):
        check_name_characters("topic", "evil\u202egnp.exe")
    with pytest.raises(UnsafeNameError, match='Invalid consumer name "a\\\\x00b": it holds the control'):
        check_name_characters("consumer", "a\x00b")


@settings(max_examples=1000)
@given(st.text(max_size=30))
def test_a_name_is_refused_exactly_when_it_holds_an_unsafe_character(name: str) -> None:
    expected = next((c for c in name if _unsafe(c)), None)
    assert unsafe_character(name) == expected
    if expected is None:
        check_name_characters("producer", name)  # letters of any script, emoji, ZWJ: fine
    else:
        with pytest.raises(UnsafeNameError, match=f"U\\+{ord(expected):04X}"):
            check_name_characters("producer", name)


@pytest.mark.parametrize("text", ["1_0", "\u0661\u0660", "\uff11\uff10", "0x10", "9223372036854775808"])
def test_numbers_in_websocket_json_strings_are_java_longs(text: str) -> None:
    with pytest.raises(WsSessionError):
        parse_consumer_command(json.dumps({"type": "permit", "permitMessages": text}))
    command = parse_consumer_command(json.dumps({"type": "permit", "permitMessages": " 10 "}))
    assert command.permit_messages == 10  # Jackson trims a string it reads as a number
