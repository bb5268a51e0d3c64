"""Bookie disks for the identity check (cookies) in the simulation and the scripted interleavings.

A simulated bookie's "disk" is its ``MemoryLedgerStore`` (what survives a crash) plus the cookies of its two
directories, kept here. :class:`SimVolumes` is the identity check's ``Volumes`` seam over them, so that a
simulated bookie starts through the same :func:`~magnetar.bookkeeper.bookie.identity.check_bookie_identity` as
a real one, against the simulation's metadata store. Wiping a bookie replaces its store with an empty one and
forgets its cookies: a new volume under the old id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.bookkeeper.bookie.cookie import COOKIE_FILE_NAME, Cookie
from magnetar.bookkeeper.bookie.identity import (
    BookieDirectories,
    BookieIdentityError,
    DirectoryState,
    Role,
    check_bookie_identity,
)
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerStore
from magnetar.bookkeeper.metadata.api import MetadataStore

SIM_INSTANCE_ID = "00000000-0000-4000-8000-00000000000a"


@dataclass
class SimDisk:
    name: str
    cookies: dict[str, Cookie] = field(default_factory=dict)

    @property
    def dirs(self) -> BookieDirectories:
        return BookieDirectories(journal=(f"/{self.name}/journal",), ledger=(f"/{self.name}/ledgers",))

    def wipe(self) -> None:
        self.cookies.clear()


class SimVolumes:
    def __init__(self, disk: SimDisk, has_data: Callable[[], bool]) -> None:
        self._disk = disk
        self._has_data = has_data

    async def inspect(self, path: str, role: Role, nested: frozenset[str]) -> DirectoryState:
        cookie = self._disk.cookies.get(path)
        data = self._has_data()
        return DirectoryState(path, role, cookie, empty=cookie is None and not data, bookie_data=data)

    async def stamp(self, path: str, cookie: Cookie) -> None:
        self._disk.cookies[path] = cookie

    async def unstamp(self, path: str) -> None:
        self._disk.cookies.pop(path, None)

    async def contents(self, path: str, nested: frozenset[str]) -> list[str]:
        return [COOKIE_FILE_NAME] if path in self._disk.cookies else []

    async def wipe(self, path: str, nested: frozenset[str]) -> None:
        self._disk.cookies.pop(path, None)


async def start_with_identity(metadata: MetadataStore, disk: SimDisk, store: LedgerStore) -> str | None:
    """Run the bookie's identity check; None when it may start, else why it is refused."""
    volumes = SimVolumes(disk, lambda: any(True for _ in store.ledgers()))
    try:
        await check_bookie_identity(
            metadata, disk.name, disk.dirs, volumes=volumes, new_instance_id=lambda: SIM_INSTANCE_ID
        )
    except BookieIdentityError as exc:
        return str(exc)
    return None
