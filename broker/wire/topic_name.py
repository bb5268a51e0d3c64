"""Topic and namespace names, as Pulsar's ``TopicName`` / ``NamespaceName`` / ``NamedEntity`` parse them.

Forms accepted (``TopicName`` constructor):

* ``persistent://tenant/namespace/topic`` — the full v2 name;
* ``tenant/namespace/topic`` — short form, domain ``persistent``;
* ``topic`` — short form, ``persistent://public/default/topic``.

``non-persistent://`` names in-memory topics, served only where a caller asks for them (the WebSocket API,
lookup, the ``non-persistent`` admin routes): :func:`parse_topic_name` reports one as
:class:`UnsupportedTopicDomainError` unless asked to allow it, so the persistent-only paths refuse it.
Legacy v1 names with a cluster segment (``persistent://tenant/cluster/ns/topic``, and so any v2 local name
containing ``/``) are refused: Magnetar has no clusters.

Rules: tenant and namespace match ``NamedEntity`` — ASCII letters, digits, ``_ - = : .``, non-empty (Java's
``\\w`` is ASCII-only) — and, as Magnetar bounds, are at most :data:`NAMED_ENTITY_CHARS_MAX` characters and
neither ``.`` nor ``..`` (a metadata path cannot hold a relative segment; Pulsar's ZooKeeper refuses them
too). The local name is free text (Pulsar does not check it) except that it must be non-empty, hold no
control character (:func:`check_no_control_characters`: NUL and the other C0 controls, DEL, the C1 controls,
the bidirectional formatting characters that reorder how a listing displays it, and unpaired surrogates,
which have no UTF-8 form), be neither ``.`` nor ``..``, and, as Magnetar bounds, be
at most :data:`LOCAL_NAME_CHARS_MAX` characters and :data:`LOCAL_NAME_ENCODED_CHARS_MAX` once encoded. Where
it appears in a path (REST paths, the managed-ledger name) it is encoded like Java's ``URLEncoder``
(``Codec.encode``): letters, digits and ``. - * _`` stay, space becomes ``+``, every other byte of the UTF-8
form becomes ``%XX``. Subscription names follow the same rules (:func:`check_subscription_name`); in
metadata paths they are percent-encoded (``%XX`` for every byte but letters, digits and ``_ . - ~``).

The bounds keep every metadata path a name builds (``/managed-ledgers/<tenant>/<namespace>/persistent/
<encoded local name>/<encoded subscription>`` is the longest) under the metadata store's path bound, so a name
accepted here is stored alike by every metadata store (memory, RocksDB, ZooKeeper).

Bounds (Magnetar's; Pulsar has none). Names become segments of metadata paths, which may hold at most 4 KiB
and no ``.`` or ``..`` segment: so ``.`` and ``..`` are not names (of a tenant, namespace, cluster or topic),
a tenant, namespace or cluster name has at most :data:`NAMED_ENTITY_CHARS_MAX` characters, and a local name
at most :data:`LOCAL_NAME_ENCODED_CHARS_MAX` characters once URL-encoded (1,024 ASCII characters always
fit; fewer of the characters that take several UTF-8 bytes). Subscription names have their own rule
(:func:`check_subscription_name`).

Partitions are topics named ``<topic>-partition-<i>``; ``i`` counts only when it is the canonical decimal form
of a non-negative 32-bit integer (``-partition-01`` and ``-partition--1`` are not partitions, as in Pulsar).
The managed ledger of a topic is named ``tenant/namespace/persistent/<encoded local name>``
(``getPersistenceNamingEncoding``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote

from magnetar.broker.wire.errors import (
    InvalidSubscriptionNameError,
    InvalidTopicNameError,
    UnsupportedTopicDomainError,
)
from magnetar.broker.wire.strict_input import describe_character, unsafe_character

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITIONED_TOPIC_SUFFIX = "-partition-"
NAMED_ENTITY_CHARS_MAX = 128
"""Magnetar's bound on a tenant, namespace or cluster name (Pulsar has none)."""
LOCAL_NAME_CHARS_MAX = 1024
"""Magnetar's bound on a topic's local name (Pulsar has none); keeps metadata keys and paths bounded."""
LOCAL_NAME_ENCODED_CHARS_MAX = 2048
"""Magnetar's bound on a topic's local name once URL-encoded (as it appears in paths)."""
SUBSCRIPTION_NAME_CHARS_MAX = 1024
"""Magnetar's bound on a subscription name (Pulsar has none)."""
SUBSCRIPTION_NAME_ENCODED_CHARS_MAX = 1536
"""Magnetar's bound on a subscription name once percent-encoded (as it appears in metadata paths)."""
INT32_MAX = 2**31 - 1

_NAMED_ENTITY = re.compile(r"[-=:.A-Za-z0-9_]+")
RELATIVE_SEGMENTS = frozenset({".", ".."})
"""Names a metadata path (and a URL) would read as "this" or "the parent": never names."""
_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")
_HEX = "0123456789ABCDEF"


class TopicDomain(StrEnum):
    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


def check_named_entity(kind: str, name: str) -> None:
    """Pulsar's ``NamedEntity.checkName`` (plus non-emptiness, checked by ``validateNamespaceName``), and
    Magnetar's bounds: at most :data:`NAMED_ENTITY_CHARS_MAX` characters, not ``.`` or ``..``."""
    if not _NAMED_ENTITY.fullmatch(name):
        raise InvalidTopicNameError(f"Invalid {kind} name: {name!r}")
    if name in RELATIVE_SEGMENTS:
        raise InvalidTopicNameError(f"Invalid {kind} name: {name!r} is a relative path segment")
    if len(name) > NAMED_ENTITY_CHARS_MAX:
        raise InvalidTopicNameError(f"Invalid {kind} name: longer than {NAMED_ENTITY_CHARS_MAX} characters")


def check_no_control_characters(
    kind: str, name: str, error: type[InvalidTopicNameError] = InvalidTopicNameError
) -> None:
    """Refuse a name holding a control character (C0, DEL, C1), a bidirectional formatting character or a
    lone surrogate, naming the first one (:mod:`.strict_input` has why)."""
    found = unsafe_character(name)
    if found is not None:
        raise error(f"Invalid {kind} name: {name!r} holds {describe_character(found)}")


def check_subscription_name(name: str) -> None:
    """A subscription name: non-empty, no control character, not ``.``/``..``, within the two bounds."""
    if not name:
        raise InvalidSubscriptionNameError("Invalid subscription name: empty")
    check_no_control_characters("subscription", name, InvalidSubscriptionNameError)
    if name in RELATIVE_SEGMENTS:
        raise InvalidSubscriptionNameError(f"Invalid subscription name: {name!r} is a relative path segment")
    if len(name) > SUBSCRIPTION_NAME_CHARS_MAX:
        raise InvalidSubscriptionNameError(
            f"Invalid subscription name: longer than {SUBSCRIPTION_NAME_CHARS_MAX} characters"
        )
    if len(quote(name, safe="")) > SUBSCRIPTION_NAME_ENCODED_CHARS_MAX:
        raise InvalidSubscriptionNameError(
            f"Invalid subscription name: longer than {SUBSCRIPTION_NAME_ENCODED_CHARS_MAX} characters "
            "once percent-encoded"
        )


def url_encode(text: str) -> str:
    """Java's ``URLEncoder.encode(text, UTF_8)`` (Pulsar's ``Codec.encode``)."""
    out: list[str] = []
    for byte in text.encode("utf-8"):
        if byte in _URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append("%" + _HEX[byte >> 4] + _HEX[byte & 15])
    return "".join(out)


def url_decode(text: str) -> str:
    """Java's ``URLDecoder.decode(text, UTF_8)`` (Pulsar's ``Codec.decode``): ``+`` is a space, ``%XX`` a
    byte; a malformed escape or invalid UTF-8 raises :class:`InvalidTopicNameError`."""
    if "%" not in text and "+" not in text:
        return text
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char == "+":
            out.append(0x20)
            i += 1
        elif char == "%":
            digits = text[i + 1 : i + 3]
            if len(digits) != 2 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise InvalidTopicNameError(f"Illegal hex characters in escape (%) pattern: {text!r}")
            out.append(int(digits, 16))
            i += 3
        else:
            out += char.encode("utf-8")
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidTopicNameError(f"not valid UTF-8 after URL decoding: {text!r}") from None


def partition_index_of(name: str) -> int:
    """Pulsar's ``TopicName.getPartitionIndex``: the ``i`` of a trailing ``-partition-<i>``, else -1."""
    head, sep, index = name.rpartition(PARTITIONED_TOPIC_SUFFIX)
    if not sep or not head:
        return -1  # (Pulsar would count "-partition-1" alone; its base name would be empty)
    if not index.isascii() or not index.isdigit() or (len(index) > 1 and index[0] == "0"):
        return -1
    value = int(index)
    return value if value <= INT32_MAX else -1


@dataclass(frozen=True, slots=True)
class NamespaceName:
    tenant: str
    namespace: str

    def __post_init__(self) -> None:
        check_named_entity("tenant", self.tenant)
        check_named_entity("namespace", self.namespace)

    @classmethod
    def parse(cls, name: str) -> NamespaceName:
        """``tenant/namespace`` (the legacy ``tenant/cluster/namespace`` is refused)."""
        parts = name.split("/")
        if len(parts) != 2:
            raise InvalidTopicNameError(
                f"Invalid namespace format. expected <tenant>/<namespace> but got: {name!r}"
            )
        return cls(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True, slots=True)
class TopicName:
    """A validated v2 topic name. Construct with :func:`parse_topic_name` or :meth:`of`."""

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str

    def __post_init__(self) -> None:
        check_named_entity("tenant", self.tenant)
        check_named_entity("namespace", self.namespace)
        if not self.local_name:
            raise InvalidTopicNameError(f"Invalid topic name: empty local name in {self._full()!r}")
        if "/" in self.local_name:
            raise InvalidTopicNameError(
                f"Invalid topic name: {self._full()!r} (cluster-qualified v1 names are not supported)"
            )
        check_no_control_characters("topic", self.local_name)
        if self.local_name in RELATIVE_SEGMENTS:
            raise InvalidTopicNameError(f"Invalid topic name: {self._full()!r} (a relative path segment)")
        if len(self.local_name) > LOCAL_NAME_CHARS_MAX:
            raise InvalidTopicNameError(
                f"Invalid topic name: local name longer than {LOCAL_NAME_CHARS_MAX} characters"
            )
        if len(url_encode(self.local_name)) > LOCAL_NAME_ENCODED_CHARS_MAX:
            raise InvalidTopicNameError(
                f"Invalid topic name: local name longer than {LOCAL_NAME_ENCODED_CHARS_MAX} characters "
                "once URL-encoded"
            )

    @classmethod
    def of(
        cls, tenant: str, namespace: str, local_name: str, domain: TopicDomain = TopicDomain.PERSISTENT
    ) -> TopicName:
        return cls(domain, tenant, namespace, local_name)

    def _full(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    def __str__(self) -> str:
        return self._full()

    @property
    def full_name(self) -> str:
        return self._full()

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def is_persistent(self) -> bool:
        return self.domain is TopicDomain.PERSISTENT

    @property
    def encoded_local_name(self) -> str:
        return url_encode(self.local_name)

    @property
    def partition_index(self) -> int:
        """-1 unless the name ends in ``-partition-<i>``."""
        return partition_index_of(self.local_name)

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this (partitioned) topic."""
        if not 0 <= index <= INT32_MAX:
            raise InvalidTopicNameError(f"Invalid partition index {index}")
        if self.local_name.endswith(f"{PARTITIONED_TOPIC_SUFFIX}{index}"):
            return self
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local_name}-partition-{index}")

    @property
    def partitioned_topic(self) -> TopicName:
        """For ``x-partition-3`` the topic ``x``; otherwise this topic."""
        if not self.is_partition:
            return self
        base = self.local_name[: self.local_name.rindex(PARTITIONED_TOPIC_SUFFIX)]
        return TopicName(self.domain, self.tenant, self.namespace, base)

    @property
    def managed_ledger_name(self) -> str:
        """``tenant/namespace/persistent/<encoded local name>`` (``getPersistenceNamingEncoding``)."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{self.encoded_local_name}"

    @property
    def rest_path(self) -> str:
        """``persistent/tenant/namespace/<encoded local name>``: the admin and lookup path of the topic."""
        return f"{self.domain}/{self.tenant}/{self.namespace}/{self.encoded_local_name}"

    @classmethod
    def from_managed_ledger_name(cls, name: str) -> TopicName:
        parts = name.split("/")
        if len(parts) != 4:
            raise InvalidTopicNameError(f"Invalid managed ledger name: {name!r}")
        tenant, namespace, domain, encoded = parts
        return cls(_domain(domain), tenant, namespace, url_decode(encoded))


def _domain(text: str) -> TopicDomain:
    try:
        return TopicDomain(text)
    except ValueError:
        raise InvalidTopicNameError(f"Invalid topic domain: {text!r}") from None


def parse_topic_name(name: str, *, allow_non_persistent: bool = False) -> TopicName:
    """Parse a full or short topic name (see the module docstring). The local name is taken as is (already
    decoded); use :func:`url_decode` first for a name taken from a URL path."""
    if "://" not in name:
        parts = [p for p in name.split("/") if p]  # StringUtils.split drops empty tokens
        if len(parts) == 3:
            name = f"{TopicDomain.PERSISTENT}://{name}"
        elif len(parts) == 1:
            name = f"{TopicDomain.PERSISTENT}://{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}/{parts[0]}"
        else:
            raise InvalidTopicNameError(
                f"Invalid short topic name '{name}', it should be in the format of "
                "<tenant>/<namespace>/<topic> or <topic>"
            )
    scheme, _, rest = name.partition("://")
    domain = _domain(scheme)
    parts = rest.split("/", 3)
    if len(parts) == 4:
        raise InvalidTopicNameError(
            f"Invalid topic name: {name!r} (cluster-qualified v1 names are not supported)"
        )
    if len(parts) != 3:
        raise InvalidTopicNameError(f"Invalid topic name: {name!r}")
    topic = TopicName(domain, parts[0], parts[1], parts[2])
    if topic.domain is TopicDomain.NON_PERSISTENT and not allow_non_persistent:
        raise UnsupportedTopicDomainError(f"non-persistent topics are not supported: {name}")
    return topic
