"""The metadata store contract, with the semantics of Pulsar's ``MetadataStore``.

Theory of operation. The store is a tree of nodes addressed by absolute paths (``/a/b``). Each node holds a
value (bytes) and a :class:`Stat` whose ``version`` starts at 0 when the node is created and increases by one
with every write: the version is what compare-and-set is built on. ``put`` takes ``expected_version``:

* ``None``  - write unconditionally (create or overwrite);
* ``-1``    - the node must not exist (create only);
* ``n >= 0`` - the node must exist with exactly version ``n``.

A failed condition raises :class:`BadVersionError` (also when the node is missing for ``n >= 0``);
callers re-read and re-evaluate (the CAS loop of BookKeeper's ``MetadataUpdateLoop``). ``put`` creates
missing parents as empty persistent nodes, as Pulsar's stores do. Ephemeral nodes belong to the store's
session and vanish when the session ends (process exit for the embedded store, session expiry for
ZooKeeper); ephemeral nodes cannot have children. Sequential puts append a 10-digit, zero-padded counter to
the last path segment (ZooKeeper's format) and report the created path in ``Stat.path``; the counter
increases with every sequential create under the same parent but need not be contiguous (ZooKeeper derives
it from the parent's child-change count). ``delete`` takes ``expected_version`` ``None`` (any version) or
``n`` (:class:`BadVersionError` on mismatch) and raises :class:`NotFoundError` for a missing node. Paths and
values are bounded (:data:`METADATA_PATH_BYTES_MAX`, :data:`METADATA_VALUE_BYTES_MAX`) so every tree fits
a stock ZooKeeper.

Change notifications (:class:`Notification`) and session events (:class:`SessionEvent`) are delivered to
synchronous listeners on the trio thread. Listeners must not block; to do work, hand the event to a task.
Every store also keeps its :class:`~.health.MetadataHealth` (``store.health``), updated from the same
events before any listener sees them: whether the store can be used now, and since when it cannot.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.bookkeeper.metadata.health import MetadataHealth

METADATA_PATH_BYTES_MAX = 4 * 1024
"""Longest path accepted (UTF-8 bytes); bounds what a request adds to the value."""

METADATA_VALUE_BYTES_MAX = 1024 * 1024 - 8 * 1024
"""Largest value every backend accepts. ZooKeeper's default ``jute.maxbuffer`` (0xfffff bytes) bounds the
whole request - value, path, ACL and headers (~210 bytes) - and a server that receives a larger packet drops
the connection; this bound keeps a create with a maximal path under it on a stock server."""

SEQUENTIAL_SUFFIX_DIGITS = 10


class MetadataStoreError(Exception):
    """Base of every metadata-store failure."""


class StoreInUseError(MetadataStoreError):
    """Another process (or another store in this one) has the RocksDB directory open (the RocksDB backend's
    error, here with the others so that naming it does not load RocksDB)."""


class NotFoundError(MetadataStoreError):
    """The node does not exist."""


class BadVersionError(MetadataStoreError):
    """A conditional write found a different version (or found the node present / absent)."""


class InvalidPathError(MetadataStoreError, ValueError):
    """The path is not an absolute, normalized path."""


class NotEmptyError(MetadataStoreError):
    """A node with children cannot be deleted non-recursively."""


class StoreUnavailableError(MetadataStoreError):
    """The backend cannot be reached (connection lost, store closed); the outcome of a write is unknown."""


class ValueTooLargeError(MetadataStoreError, ValueError):
    """The value exceeds :data:`METADATA_VALUE_BYTES_MAX`."""


@dataclass(frozen=True, slots=True)
class Stat:
    path: str
    version: int
    creation_time_ms: int
    modification_time_ms: int
    ephemeral: bool


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    stat: Stat


class NotificationType(enum.Enum):
    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    """As Pulsar's ``SessionEvent``: connection events may heal; a lost session took its ephemerals."""

    CONNECTION_LOST = "ConnectionLost"
    RECONNECTED = "Reconnected"
    SESSION_LOST = "SessionLost"
    SESSION_REESTABLISHED = "SessionReestablished"


NotificationListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]
Unregister = Callable[[], None]


class MetadataStore(Protocol):
    async def get(self, path: str) -> GetResult | None: ...

    async def get_children(self, path: str) -> list[str]:
        """Sorted child names; a missing node has no children (empty list)."""
        ...

    async def exists(self, path: str) -> bool: ...

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat: ...

    async def delete(self, path: str, expected_version: int | None = None) -> None: ...

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it; a missing node is not an error."""
        ...

    def register_listener(self, listener: NotificationListener) -> Unregister: ...

    def register_session_listener(self, listener: SessionListener) -> Unregister: ...

    @property
    def health(self) -> MetadataHealth:
        """Whether the store can be used now (see :mod:`.health`)."""
        ...

    async def aclose(self) -> None: ...


def _zookeeper_rejects(char: str) -> bool:
    """The characters ZooKeeper's ``PathUtils.validatePath`` refuses (it sees UTF-16 code units, so every
    code point outside the BMP arrives as a refused surrogate)."""
    code = ord(char)
    return code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or code >= 0xFFF0


def validate_path(path: str) -> str:
    """Return ``path`` if it is absolute, normalized and acceptable to ZooKeeper, else raise
    :class:`InvalidPathError`. Every backend applies the same rule so a tree can move between them."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"metadata path must be absolute: {path!r}")
    if path == "/":
        return path
    if path.endswith("/") or "//" in path:
        raise InvalidPathError(f"metadata path is not normalized: {path!r}")
    if len(path.encode("utf-8", "surrogatepass")) > METADATA_PATH_BYTES_MAX:
        raise InvalidPathError(f"metadata path is longer than {METADATA_PATH_BYTES_MAX} bytes")
    if any(_zookeeper_rejects(char) for char in path):
        raise InvalidPathError(f"metadata path has a character ZooKeeper refuses: {path!r}")
    for segment in path[1:].split("/"):
        if segment in (".", ".."):
            raise InvalidPathError(f"metadata path has a relative segment: {path!r}")
    return path


def check_expected_version(expected_version: int | None) -> None:
    if expected_version is not None and expected_version < -1:
        raise ValueError(f"expected_version must be None, -1 or >= 0, not {expected_version}")


def parent_of(path: str) -> str:
    if path == "/":
        raise InvalidPathError("the root has no parent")
    head = path.rsplit("/", 1)[0]
    return head or "/"


def join(parent: str, child: str) -> str:
    return ("" if parent == "/" else parent) + "/" + child


def check_put_condition(path: str, current_version: int | None, expected_version: int | None) -> None:
    """Raise :class:`BadVersionError` unless a node at ``current_version`` (``None``: absent) satisfies
    ``expected_version`` as ``put`` defines it."""
    if expected_version is None:
        return
    if expected_version == -1:
        if current_version is not None:
            raise BadVersionError(f"{path} already exists")
    elif current_version is None:
        raise BadVersionError(f"{path} does not exist (expected version {expected_version})")
    elif current_version != expected_version:
        raise BadVersionError(f"{path} is at version {current_version}, expected {expected_version}")


def check_value(value: bytes) -> None:
    if len(value) > METADATA_VALUE_BYTES_MAX:
        raise ValueTooLargeError(
            f"metadata value of {len(value)} bytes exceeds {METADATA_VALUE_BYTES_MAX} bytes"
        )


def sequential_name(path: str, counter: int) -> str:
    return f"{path}{counter:0{SEQUENTIAL_SUFFIX_DIGITS}d}"
