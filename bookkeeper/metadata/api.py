"""The metadata store contract, with the semantics of Pulsar's ``MetadataStore``.

Theory of operation. The store is a tree of nodes addressed by absolute paths (``/a/b``). Each node holds a
value (bytes) and a :class:`Stat` whose ``version`` starts at 0 when the node is created and increases by one
with every write: the version is what compare-and-set is built on. ``put`` takes ``expected_version``:

* ``None``  - write unconditionally (create or overwrite);
* ``-1``    - the node must not exist (create only);
* ``n >= 0`` - the node must exist with exactly version ``n``.

A failed condition raises :class:`BadVersionError`; callers re-read and re-evaluate (the CAS loop of
BookKeeper's ``MetadataUpdateLoop``). ``put`` creates missing parents as empty persistent nodes, as Pulsar's
stores do. Ephemeral nodes belong to the store's session and vanish when the session ends (process exit for
the embedded store, session expiry for ZooKeeper); ephemeral nodes cannot have children. Sequential puts
append a 10-digit, zero-padded, per-parent counter to the last path segment (ZooKeeper's format) and report
the created path in ``Stat.path``.

Change notifications (:class:`Notification`) and session events (:class:`SessionEvent`) are delivered to
synchronous listeners on the trio thread. Listeners must not block; to do work, hand the event to a task.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

METADATA_VALUE_BYTES_MAX = 1024 * 1024
"""ZooKeeper's default ``jute.maxbuffer``; every backend enforces the same bound."""

SEQUENTIAL_SUFFIX_DIGITS = 10


class MetadataStoreError(Exception):
    """Base of every metadata-store failure."""


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

    async def aclose(self) -> None: ...


def validate_path(path: str) -> str:
    """Return ``path`` if it is absolute and normalized, else raise :class:`InvalidPathError`."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"metadata path must be absolute: {path!r}")
    if path == "/":
        return path
    if path.endswith("/") or "//" in path or "\x00" in path:
        raise InvalidPathError(f"metadata path is not normalized: {path!r}")
    for segment in path[1:].split("/"):
        if segment in (".", ".."):
            raise InvalidPathError(f"metadata path has a relative segment: {path!r}")
    return path


def parent_of(path: str) -> str:
    if path == "/":
        raise InvalidPathError("the root has no parent")
    head = path.rsplit("/", 1)[0]
    return head or "/"


def join(parent: str, child: str) -> str:
    return ("" if parent == "/" else parent) + "/" + child


def check_value(value: bytes) -> None:
    if len(value) > METADATA_VALUE_BYTES_MAX:
        raise ValueTooLargeError(
            f"metadata value of {len(value)} bytes exceeds {METADATA_VALUE_BYTES_MAX} bytes"
        )


def sequential_name(path: str, counter: int) -> str:
    return f"{path}{counter:0{SEQUENTIAL_SUFFIX_DIGITS}d}"
