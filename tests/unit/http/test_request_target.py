"""Which request targets the HTTP layer refuses, and the reason it gives (sans-IO, with Hypothesis)."""

from __future__ import annotations

import re
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.runtime.http.request_target import RequestLine, h11_reason, target_error

ALLOWED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?"
HEX = b"0123456789ABCDEFabcdef"


def well_formed(target: bytes) -> bool:
    offset = 0
    while offset < len(target):
        byte = target[offset]
        if byte == ord("%"):
            if target[offset + 1 : offset + 2] == b"" or target[offset + 1] not in HEX:
                return False
            if target[offset + 2 : offset + 3] == b"" or target[offset + 2] not in HEX:
                return False
            offset += 3
            continue
        if byte not in ALLOWED:
            return False
        offset += 1
    return True


@given(st.binary(max_size=80))
def test_a_target_is_refused_exactly_when_it_holds_a_byte_rfc_3986_does_not_allow(target: bytes) -> None:
    reason = target_error(target)
    assert (reason is None) == well_formed(target)
    if reason is not None:
        offset = int(re.search(r"at offset (\d+)", reason).group(1))  # type: ignore[union-attr]
        assert target[offset] == ord("%") or target[offset] not in ALLOWED
        assert well_formed(target[:offset])  # the first offending byte is named
        assert "b'" not in reason
        assert "bytearray" not in reason
        assert reason.isprintable()


@given(st.text(max_size=40))
def test_every_percent_encoded_name_is_accepted(name: str) -> None:
    assert (
        target_error(f"/ws/v2/consumer/persistent/t/ns/topic/{quote(name, safe='')}?a={quote(name)}".encode())
        is None
    )


def test_the_reason_names_the_character_and_the_fix() -> None:
    assert target_error(b"/sub/locked#x") == (
        "Invalid request target: '#' (%23) at offset 11 is not allowed: percent-encode it"
    )
    assert "a space (%20) at offset 2" in str(target_error(b"/a b"))
    assert "control character U+0000 (%00)" in str(target_error(b"/\x00"))
    assert "DEL (%7F)" in str(target_error(b"/\x7f"))
    assert "character U+202E (%E2%80%AE) at offset 1" in str(target_error("/\u202e".encode()))
    assert "byte %FF (not UTF-8)" in str(target_error(b"/\xff"))
    assert "send a literal '%' as %25" in str(target_error(b"/100%"))
    assert target_error(b"/a%2Fb?x=%E2%80%AE&y=*") is None


def test_the_request_line_h11_refused_is_described_in_our_words() -> None:
    line = RequestLine(8192)
    line.feed(b"\r\nGET /ws/v2/producer/persistent/a/b/my ")
    line.feed(b"topic HTTP/1.1\r\nHost: x\r\n\r\n")
    reason = line.reason("illegal request line: bytearray(b'GET /ws/... HTTP/1.1')")
    assert reason == "Invalid request target: a space (%20) at offset 33 is not allowed: percent-encode it"
    line.restart(b"GET /fine HTTP/1.1\r\nBad header\r\n\r\n")
    assert line.reason("illegal header line: bytearray(b'Bad header')") == (
        "Malformed HTTP request: illegal header line"
    )
    assert h11_reason("Illegal header name b'\\x00'") == "Malformed HTTP request: Illegal header name"


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=64))
def test_the_kept_line_is_bounded_and_never_more_than_the_first_line(data: bytes, bytes_max: int) -> None:
    line = RequestLine(bytes_max)
    for start in range(0, len(data), 7):
        line.feed(data[start : start + 7])
    target = line.target()
    first = data.lstrip(b"\r\n").split(b"\n", 1)[0]
    if target is not None:
        assert len(target) <= bytes_max
        assert target in first
