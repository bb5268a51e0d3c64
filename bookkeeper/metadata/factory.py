"""Open a metadata store from its URL, as Pulsar's ``metadataStoreUrl`` (``MetadataStoreFactoryImpl``).

* ``memory://`` / ``memory://NAME`` - :class:`~.memory.MemoryMetadataStore` (NAME: a tree shared in-process)
* ``rocksdb:///abs/path`` - :class:`~.rocksdb_store.RocksDbMetadataStore`, embedded, one process (standalone);
  ``rocksdb://rel/path`` is relative to the working directory, as Pulsar's ``rocksdb://data/metadata``
* ``zk:host:port[,host:port][/chroot]`` - :class:`~.zk_store.ZkMetadataStore`; as in Pulsar a bare
  ``host:port[,host:port][/chroot]`` is ZooKeeper too

The backends import lazily (``# noqa: PLC0415``) so that importing the package does not load kazoo and
rocksdict: a process pays only for the backend it uses.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from magnetar.bookkeeper.metadata.api import (
    InvalidPathError,
    MetadataStore,
    MetadataStoreError,
    validate_path,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings

_USAGE = "use memory://[NAME], rocksdb:///PATH or zk:HOST:PORT[,HOST:PORT][/CHROOT]"
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


class InvalidMetadataUrlError(MetadataStoreError, ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ZkAddress:
    hosts: str
    """Comma-separated ``host:port`` list, as kazoo takes it."""
    chroot: str
    """Absolute path every store path is placed under (``/`` for none)."""


def parse_zk_url(url: str) -> ZkAddress:
    """Split ``zk:h:p[,h:p][/chroot]`` (or the bare host list) into hosts and chroot, or raise
    :class:`InvalidMetadataUrlError`."""
    rest = url.removeprefix("zk:").removeprefix("//")
    hosts, slash, chroot = rest.partition("/")
    chroot = slash + chroot if slash else "/"
    for host in hosts.split(","):
        match = _HOST_PORT.match(host)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise InvalidMetadataUrlError(f"bad ZooKeeper host {host!r} in metadata URL {url!r}: {_USAGE}")
    try:
        validate_path(chroot)
    except InvalidPathError as exc:
        raise InvalidMetadataUrlError(f"bad chroot in metadata URL {url!r}: {exc}") from exc
    return ZkAddress(hosts, chroot)


def _rocksdb_directory(url: str) -> str:
    directory = url.removeprefix("rocksdb://")
    if not directory:
        raise InvalidMetadataUrlError(f"metadata URL {url!r} names no directory: {_USAGE}")
    return directory


async def _open(url: str, settings: MetadataStoreSettings) -> MetadataStore:
    if url.startswith("memory:"):
        name = url.removeprefix("memory:").lstrip("/")
        return MemoryMetadataStore(name or None)
    if url.startswith("rocksdb:"):
        if not url.startswith("rocksdb://"):
            raise InvalidMetadataUrlError(f"unsupported metadata store URL {url!r}: {_USAGE}")
        from magnetar.bookkeeper.metadata.rocksdb_store import RocksDbMetadataStore  # noqa: PLC0415

        return RocksDbMetadataStore.open(_rocksdb_directory(url))
    if url.startswith("zk:") or _HOST_PORT.match(url.partition("/")[0].split(",")[0]):
        address = parse_zk_url(url)
        from magnetar.bookkeeper.metadata.zk_store import ZkMetadataStore  # noqa: PLC0415

        return await ZkMetadataStore.connect(address.hosts, address.chroot, settings)
    raise InvalidMetadataUrlError(f"unsupported metadata store URL {url!r}: {_USAGE}")


@asynccontextmanager
async def open_metadata_store(
    url: str, settings: MetadataStoreSettings | None = None
) -> AsyncIterator[MetadataStore]:
    """Open the store ``url`` names for the duration of the ``async with`` block, then close it."""
    store = await _open(url, settings or MetadataStoreSettings())
    try:
        yield store
    finally:
        await store.aclose()
