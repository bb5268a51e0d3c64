"""GET_TOPICS_OF_NAMESPACE, sans-IO: the request, the answer, and the pattern and hash rules of Pulsar's
broker (its ``TopicList``), for pattern consumers (``client.subscribe(re.compile(...), ...)``) that poll the
topics of a namespace.

Request (type 32): ``request_id`` (1), ``namespace`` "tenant/ns" (2), ``mode`` (3: PERSISTENT 0, the
default; NON_PERSISTENT 1; ALL 2), optional ``topics_pattern`` (4) and ``topics_hash`` (5). Answer (type 33):
``request_id`` (1), the topics' full names (2, every partition on its own), ``filtered`` (3), ``topics_hash``
(4) and ``changed`` (5).

Theory of operation: the door lists the namespace's topics and hands them to :func:`encode_topics_answer`.
With a pattern of at most :data:`PATTERN_LENGTH_MAX` characters the list is filtered here (``filtered``
true): the pattern, its ``persistent://`` or ``non-persistent://`` scheme removed, must match the whole of a
topic's name without scheme and without its ``-partition-N`` suffix. Matching uses RE2 (linear time, as
Pulsar's re2j), so a hostile pattern cannot stall the broker; a pattern RE2 cannot compile (back-references,
look-around) or a longer one is not applied (``filtered`` false) and the client filters, as Pulsar's broker
does for a pattern over its limit. The hash is Pulsar's: CRC-32C of the sorted names joined by ``,``, written
as Guava writes a 32-bit hash (its four bytes little-endian, in lower-case hex). When the client's
``topics_hash`` equals it, the answer carries no names and ``changed`` false.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c
import re2

from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, ProtobufError, Writer

GET_TOPICS_OF_NAMESPACE = 32
GET_TOPICS_OF_NAMESPACE_RESPONSE = 33
PATTERN_LENGTH_MAX = 50
"""Pulsar's ``subscriptionPatternMaxLength``: a longer pattern is not applied by the broker."""
_ID_MAX = 2**63 - 1
_SCHEMES = ("persistent://", "non-persistent://")
_PARTITION = "-partition-"


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is answered, not logged by RE2 itself


class Mode(enum.IntEnum):
    PERSISTENT = 0
    NON_PERSISTENT = 1
    ALL = 2


@dataclass(frozen=True, slots=True)
class GetTopics:
    request_id: int
    namespace: str
    mode: int
    """As sent (any uint): the door refuses one that is not a :class:`Mode`."""
    pattern: str | None
    topics_hash: str | None


def decode_get_topics(f: Fields) -> GetTopics:
    request_id = f.required_uint(1)
    if request_id > _ID_MAX:
        raise ProtobufError(f"{f.name}: request_id {request_id} is out of range")
    return GetTopics(
        request_id=request_id,
        namespace=f.required_string(2),
        mode=f.uint(3),
        pattern=f.optional_string(4),
        topics_hash=f.optional_string(5),
    )


def topics_hash(topics: Sequence[str]) -> str:
    """Pulsar's hash of a topic list (see the module docstring)."""
    data = ",".join(sorted(topics)).encode("utf-8")
    return crc32c.crc32c(data).to_bytes(4, "little").hex()


def _without_scheme(pattern: str) -> str:
    for scheme in _SCHEMES:
        if pattern.startswith(scheme):
            return pattern[len(scheme) :]
    return pattern


def _matched_name(topic: str) -> str:
    """What a pattern is matched against: the name without scheme and without a partition suffix."""
    name = _without_scheme(topic)
    base, sep, index = name.rpartition(_PARTITION)
    return base if sep and index.isdigit() else name


def filter_topics(topics: Sequence[str], pattern: str) -> list[str] | None:
    """The topics the pattern matches, or None when the broker does not apply it (too long, not RE2)."""
    if len(pattern) > PATTERN_LENGTH_MAX:
        return None
    try:
        compiled = re2.compile(_without_scheme(pattern), _RE2_OPTIONS)
    except re2.error:
        return None
    return [topic for topic in topics if compiled.fullmatch(_matched_name(topic)) is not None]


def encode_topics_answer(command: GetTopics, topics: Sequence[str]) -> bytes:
    """The GET_TOPICS_OF_NAMESPACE_RESPONSE command for ``topics`` (the namespace's, in ``command.mode``)."""
    names = list(topics)
    filtered = False
    if command.pattern is not None:
        matched = filter_topics(names, command.pattern)
        if matched is not None:
            names, filtered = matched, True
    digest = topics_hash(names)
    changed = command.topics_hash != digest
    w = Writer().uint(1, command.request_id)
    if changed:
        for name in names:
            w.string(2, name)
    w.boolean(3, filtered).string(4, digest).boolean(5, changed)
    sub = w.bytes()
    return (
        Writer().uint(1, GET_TOPICS_OF_NAMESPACE_RESPONSE).data(GET_TOPICS_OF_NAMESPACE_RESPONSE, sub).bytes()
    )
