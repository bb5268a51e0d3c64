"""Fixtures of the metadata-store tests: one contract, three backends.

``backend`` is parametrized over memory, rocksdb (a tmp_path directory) and zk (the session's ZooKeeper
server, a fresh chroot per test); ``store`` is a store opened on it for the test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fixtures.metadata import TEST_ZK_SETTINGS, Backend

from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings


@pytest.fixture(params=["memory", "rocksdb", pytest.param("zk", marks=pytest.mark.zookeeper)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    kind = request.param
    if kind == "memory":
        return Backend(kind, f"memory://contract-{uuid.uuid4().hex}", MetadataStoreSettings())
    if kind == "rocksdb":
        return Backend(kind, f"rocksdb://{tmp_path / 'metadata'}", MetadataStoreSettings())
    url: str = request.getfixturevalue("zookeeper_url")
    return Backend(kind, url, TEST_ZK_SETTINGS)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[MetadataStore]:
    async with backend.open() as opened:
        yield opened


@pytest.fixture(params=["memory", pytest.param("zk", marks=pytest.mark.zookeeper)])
def shared_backend(request: pytest.FixtureRequest) -> Backend:
    """The backends where several stores (sessions) can use one tree at the same time."""
    if request.param == "memory":
        return Backend("memory", f"memory://shared-{uuid.uuid4().hex}", MetadataStoreSettings())
    url: str = request.getfixturevalue("zookeeper_url")
    return Backend("zk", url, TEST_ZK_SETTINGS)
