"""Which bytes a request target may hold, and the answer when one holds others (sans-IO).

Theory of operation. A request target (the path and ``?query`` of the request line, RFC 9112 §3.2) is made of
RFC 3986's path and query characters: the unreserved ``A-Z a-z 0-9 - . _ ~``, the sub-delimiters
``! $ & ' ( ) * + , ; =``, ``:``, ``@``, ``/``, ``?`` and percent-encodings ``%XX`` (two hexadecimal
digits). Every other byte - a space, a control byte, DEL, a byte outside ASCII, and the visible characters
``" # < > [ \\ ] ^ ` { | }`` - must be sent percent-encoded. The server refuses a target holding one with
``400 Bad Request`` before routing, on every port and for WebSocket upgrades alike: ``#`` starts a fragment,
which never belongs in a request, and one component reading ``a#b`` as a name while another cuts it at the
``#`` would check one thing and do another. Refusing also means every accepted target is plain ASCII, so
it can be handed on (the owner proxy does) byte for byte.

h11 already refuses some of these bytes itself (a space, control bytes, non-ASCII), in a message that shows
the raw line; :class:`RequestLine` keeps the request line as it arrives so that the answer can name the
character in our words instead. Answers name the character as ``%XX`` (or ``U+XXXX`` and its UTF-8
percent-encoding for a character outside ASCII), its offset in the target (the first byte is 0), and the fix.
"""

from __future__ import annotations

import re

_ALLOWED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?%")
_HEX = frozenset(b"0123456789ABCDEFabcdef")
_VALID = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
"""The same rule as one pattern: the fast path for the targets that follow it (nearly all)."""
_H11_DETAIL = re.compile(r"""(:\s*)?(bytearray\(|b'|b").*""", re.DOTALL)


def target_error(target: bytes) -> str | None:
    """Why ``target`` is refused (a sentence for ``{"reason": ...}``), or None when every byte is allowed."""
    if _VALID.fullmatch(target):
        return None
    for offset, byte in enumerate(target):
        if byte in _ALLOWED:
            if byte == 0x25 and not (  # '%'
                len(target) >= offset + 3 and target[offset + 1] in _HEX and target[offset + 2] in _HEX
            ):
                return (
                    f"Invalid request target: '%' at offset {offset} does not start a percent-encoding "
                    "(% and two hexadecimal digits); send a literal '%' as %25"
                )
            continue
        return (
            f"Invalid request target: {_describe(target, offset)} at offset {offset} is not allowed: "
            "percent-encode it"
        )
    return None


def _describe(target: bytes, offset: int) -> str:
    byte = target[offset]
    if byte < 0x80:
        shown = {0x20: "a space", 0x7F: "DEL"}.get(byte)
        if shown is None:
            shown = f"'{chr(byte)}'" if 0x21 <= byte <= 0x7E else f"control character U+{byte:04X}"
        return f"{shown} (%{byte:02X})"
    for length in (2, 3, 4):  # a UTF-8 sequence: name the character and its whole encoding
        try:
            char = target[offset : offset + length].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(char) == 1:
            encoded = "".join(f"%{b:02X}" for b in char.encode())
            return f"character U+{ord(char):04X} ({encoded})"
    return f"byte %{byte:02X} (not UTF-8)"


def h11_reason(message: str) -> str:
    """h11's reason for refusing a request, without the raw bytes it quotes (Python reprs)."""
    text = _H11_DETAIL.sub("", message).strip()
    return f"Malformed HTTP request: {text}" if text else "Malformed HTTP request"


class RequestLine:
    """The request line of the request being parsed, as it arrives (at most ``bytes_max`` bytes kept), for
    the reason of a refusal h11 gives without it."""

    __slots__ = ("_buffer", "_bytes_max", "_complete")

    def __init__(self, bytes_max: int) -> None:
        self._bytes_max = bytes_max
        self._buffer = bytearray()
        self._complete = False

    def restart(self, pending: bytes = b"") -> None:
        """A new request begins (``pending``: its bytes received already)."""
        self._buffer.clear()
        self._complete = False
        if pending:
            self.feed(pending)

    def feed(self, data: bytes) -> None:
        if self._complete:
            return
        if not self._buffer:
            data = data.lstrip(b"\r\n")  # empty lines before a request line are ignored (RFC 9112 §2.2)
        end = data.find(b"\n")
        part = data if end < 0 else data[:end]
        self._buffer += part[: self._bytes_max - len(self._buffer)]
        self._complete = end >= 0 or len(self._buffer) >= self._bytes_max

    def target(self) -> bytes | None:
        """The target of the line received so far (between the method and the HTTP version), if any."""
        line = bytes(self._buffer).rstrip(b"\r")
        method_end = line.find(b" ")
        if method_end < 0:
            return None
        rest = line[method_end + 1 :]
        version_start = rest.rfind(b" ")
        if version_start >= 0 and rest[version_start + 1 :].startswith(b"HTTP/"):
            rest = rest[:version_start]
        return rest

    def reason(self, h11_message: str) -> str:
        """The reason of a refusal of this request: the first character its target may not hold, else
        h11's reason in our words."""
        target = self.target()
        error = target_error(target) if target else None
        return error or h11_reason(h11_message)
