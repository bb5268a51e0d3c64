"""Metadata store URLs (Pulsar's ``metadataStoreUrl`` forms) and settings validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.bookkeeper.metadata.factory import (
    InvalidMetadataUrlError,
    ZkAddress,
    open_metadata_store,
    parse_zk_url,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.metadata.rocksdb_store import RocksDbMetadataStore
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("zk:127.0.0.1:2181", ZkAddress("127.0.0.1:2181", "/")),
        (
            "zk:zk-1:2181,zk-2.example.com:2182/pulsar",
            ZkAddress("zk-1:2181,zk-2.example.com:2182", "/pulsar"),
        ),
        ("zk://h:2181/a/b", ZkAddress("h:2181", "/a/b")),
        ("zk:[::1]:2181", ZkAddress("[::1]:2181", "/")),
        ("h1:2181,h2:2181/c", ZkAddress("h1:2181,h2:2181", "/c")),
    ],
)
def test_zk_urls_parse(url: str, address: ZkAddress) -> None:
    assert parse_zk_url(url) == address


@pytest.mark.parametrize(
    "url",
    [
        "",
        "zk:",
        "zk:host",
        "zk:host:port",
        "zk:host:0",
        "zk:host:70000",
        "zk:h:2181,",
        "zk:h:2181/chroot/",
        "zk:h:2181//x",
        "rocksdb://",
        "rocksdb:/data",
        "etcd:http://h:2379",
        "memroy://",
        "/just/a/path",
    ],
)
async def test_bad_urls_are_refused_clearly(url: str) -> None:
    with pytest.raises(InvalidMetadataUrlError, match="metadata"):
        async with open_metadata_store(url):
            pass


async def test_memory_and_rocksdb_urls_open_their_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_metadata_store("memory://") as store:
        assert isinstance(store, MemoryMetadataStore)
    async with open_metadata_store(f"rocksdb://{tmp_path / 'abs'}") as store:
        assert isinstance(store, RocksDbMetadataStore)
        await store.put("/x", b"", None)
    monkeypatch.chdir(tmp_path)
    async with open_metadata_store("rocksdb://data/metadata") as store:  # relative, as Pulsar's default
        assert isinstance(store, RocksDbMetadataStore)
        await store.put("/relative", b"", None)
    async with open_metadata_store(f"rocksdb://{tmp_path / 'data/metadata'}") as store:
        assert await store.exists("/relative")


async def test_named_memory_stores_share_a_tree() -> None:
    async with (
        open_metadata_store("memory://factory-shared") as a,
        open_metadata_store("memory://factory-shared") as b,
    ):
        await a.put("/x", b"1", None)
        assert await b.exists("/x")


def test_settings_must_be_positive() -> None:
    with pytest.raises(ValueError, match="session_timeout_ms"):
        MetadataStoreSettings(session_timeout_ms=0)
    with pytest.raises(ValueError, match="zk_blocking_calls_max"):
        MetadataStoreSettings(zk_blocking_calls_max=-1)
