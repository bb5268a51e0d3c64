"""Numbers and names as clients send them, read one strict way by every API (admin REST, WebSocket).

Numbers. Python's ``int()`` reads much more than a number a Java server takes: ``"1_0"`` (10), Arabic-Indic
(U+0660-U+0669) and fullwidth (U+FF10-U+FF19) digits, surrounding spaces, and any size. A number a client
sends - in a path, a query parameter or a string in a body - is read as Java's ``Long.parseLong`` reads it: an
optional
ASCII ``+`` or ``-`` and one or more ASCII digits, nothing else, within the signed 64-bit range
(:func:`parse_long`); then within the parameter's own range (``low`` / ``high``: a Java ``int`` is
:data:`INT32_MIN` .. :data:`INT32_MAX`). A refusal is a :class:`NumberFormatError` whose message names the
parameter and shows the value as sent (escaped, and shortened past :data:`SHOWN_CHARS_MAX` characters);
each API answers it as its own bad-request error (400).

Names. A name a client gives - of a topic, subscription, producer, consumer, reader or role - is shown in
listings, stats and logs. Control characters (Unicode category Cc: C0, DEL, C1) break those lines, and the
bidirectional formatting characters (U+202A-U+202E embeddings and overrides, U+2066-U+2069 isolates, the
U+200E/U+200F marks, U+061C) reorder what is displayed after them, so a name can pose as another
(``"evil\\u202egnp.exe"`` displays as ``"evilexe.png"``). :func:`unsafe_character` finds the first of them
(or a lone surrogate, which has no UTF-8 form); :func:`check_name_characters` refuses a name holding one with
a :class:`UnsafeNameError` naming the character as ``U+XXXX``.

Sans-IO: plain functions over strings.
"""

from __future__ import annotations

import re

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SHOWN_CHARS_MAX = 40
"""Longest part of a refused value shown in an error message."""

_JAVA_LONG = re.compile(r"[+-]?[0-9]+", re.ASCII)
_UNSAFE = re.compile(r"[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Cc, the bidirectional formatting characters, and surrogates (see the module docstring)."""


class NumberFormatError(ValueError):
    """A number that is not a Java ``long``, or outside its parameter's range."""


class UnsafeNameError(ValueError):
    """A name holding a control or bidirectional formatting character."""


def shown(text: str) -> str:
    """``text`` as an error message shows it: escaped (so an invisible character is seen), shortened."""
    escaped = text.encode("unicode_escape", errors="backslashreplace").decode("ascii").replace('"', '\\"')
    return escaped if len(escaped) <= SHOWN_CHARS_MAX else escaped[:SHOWN_CHARS_MAX] + "..."


def is_decimal_integer(text: str) -> bool:
    """Whether ``text`` is written as Java writes an integer (an optional ASCII sign, ASCII digits), of any
    size: for a caller that words an out-of-range number its own way."""
    return _JAVA_LONG.fullmatch(text) is not None


def parse_long(name: str, text: str, *, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """``text`` as Java's ``Long.parseLong`` reads it, in ``low .. high``; :class:`NumberFormatError` else."""
    if not is_decimal_integer(text):
        raise NumberFormatError(
            f'Invalid {name} "{shown(text)}": not a decimal integer (an optional sign and ASCII digits only)'
        )
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise NumberFormatError(f'Invalid {name} "{shown(text)}": out of the range of a 64-bit integer')
    if not low <= value <= high:
        raise NumberFormatError(f'Invalid {name} "{shown(text)}": must be {_range(low, high)}')
    return value


def parse_int(name: str, text: str) -> int:
    """Java's ``Integer.parseInt``: :func:`parse_long` within the 32-bit range."""
    return parse_long(name, text, low=INT32_MIN, high=INT32_MAX)


def _range(low: int, high: int) -> str:
    if high == INT64_MAX:
        return f"at least {low}"
    if low == INT64_MIN:
        return f"at most {high}"
    return f"between {low} and {high}"


def unsafe_character(text: str) -> str | None:
    """The first control, bidirectional formatting or surrogate character of ``text``; None if it has none."""
    found = _UNSAFE.search(text)
    return None if found is None else found.group()


def describe_character(char: str) -> str:
    """What :func:`unsafe_character` found, named: ``the bidirectional formatting character U+202E``."""
    if char <= "\x9f":
        kind = "control character"
    elif "\ud800" <= char <= "\udfff":
        kind = "lone surrogate"
    else:
        kind = "bidirectional formatting character"
    return f"the {kind} U+{ord(char):04X}"


def check_name_characters(kind: str, name: str) -> None:
    """Refuse a ``kind`` name holding an unsafe character (see the module docstring), naming it."""
    char = unsafe_character(name)
    if char is not None:
        raise UnsafeNameError(f'Invalid {kind} name "{shown(name)}": it holds {describe_character(char)}')
