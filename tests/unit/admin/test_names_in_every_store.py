"""Property: names behave the same on every metadata store (memory, RocksDB, a real ZooKeeper).

For any tenant, namespace, topic (plain and partitioned) and subscription name: when the name validation
(:mod:`magnetar.broker.wire.topic_name`) accepts it, the admin API creates it, lists it and reads it back
exactly
as given, and deletes it; when the validation refuses it, the answer is 412 and no request of that call
reaches the store with the name (raw or encoded) as a path segment. A name holding a control character is
always refused. The admin API runs over a store wrapped in a recorder, one server per backend for the module,
in a thread (hypothesis drives a blocking client).
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import trio
from fixtures.admin import TOPIC_ML_SETTINGS, run_topic_server
from fixtures.metadata import TEST_ZK_SETTINGS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from magnetar.admin.processes.cluster_init import ClusterInit, initialize_cluster_metadata
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.metadata.factory import open_metadata_store
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings
from magnetar.broker.wire.errors import InvalidTopicNameError
from magnetar.broker.wire.topic_name import (
    PARTITIONED_TOPIC_SUFFIX,
    TopicName,
    check_named_entity,
    check_subscription_name,
    url_encode,
)

EXAMPLES = 100
NS = "/admin/v2/persistent/public/default"
TENANT_BODY = {"adminRoles": [], "allowedClusters": ["standalone"]}
CONTROL = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]


class RecordingStore:
    """A metadata store that remembers the path of every call it passes on."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def _seen(self, path: str) -> None:
        with self._lock:
            self.paths.append(path)

    def count(self) -> int:
        with self._lock:
            return len(self.paths)

    def since(self, start: int) -> list[str]:
        with self._lock:
            return self.paths[start:]

    async def get(self, path: str) -> Any:
        self._seen(path)
        return await self._inner.get(path)

    async def get_children(self, path: str) -> list[str]:
        self._seen(path)
        return await self._inner.get_children(path)

    async def exists(self, path: str) -> bool:
        self._seen(path)
        return await self._inner.exists(path)

    async def put(self, path: str, value: bytes, expected_version: int | None, **kwargs: Any) -> Any:
        self._seen(path)
        return await self._inner.put(path, value, expected_version, **kwargs)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._seen(path)
        await self._inner.delete(path, expected_version)

    async def delete_recursive(self, path: str) -> None:
        self._seen(path)
        await self._inner.delete_recursive(path)

    def __getattr__(self, name: str) -> Any:  # listeners, aclose
        return getattr(self._inner, name)


@dataclass
class Served:
    backend: str
    client: httpx.Client
    store: RecordingStore
    created: list[str] = field(default_factory=list)


def _store_url(kind: str, request: pytest.FixtureRequest, tmp: Path) -> tuple[str, MetadataStoreSettings]:
    if kind == "memory":
        return f"memory://names-{uuid.uuid4().hex}", MetadataStoreSettings()
    if kind == "rocksdb":
        return f"rocksdb://{tmp / 'metadata'}", MetadataStoreSettings()
    server = request.getfixturevalue("zookeeper_server")
    return server.url(f"/names-{uuid.uuid4().hex[:12]}"), TEST_ZK_SETTINGS


@pytest.fixture(scope="module", params=["memory", "rocksdb", pytest.param("zk", marks=pytest.mark.zookeeper)])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url, store_settings = _store_url(request.param, request, tmp_path_factory.mktemp("names"))
    ready: queue.Queue[tuple[str, RecordingStore, trio.lowlevel.TrioToken, trio.Event] | BaseException]
    ready = queue.Queue()

    async def serve() -> None:
        try:
            async with open_metadata_store(url, store_settings) as inner:
                store = RecordingStore(inner)
                await initialize_cluster_metadata(store, ClusterInit("standalone", "http://127.0.0.1:8080"))  # type: ignore[arg-type]
                stop = trio.Event()
                async with run_topic_server(store, TOPIC_ML_SETTINGS) as running:  # type: ignore[arg-type]
                    ready.put((running.server.base_url, store, trio.lowlevel.current_trio_token(), stop))
                    await stop.wait()
        except BaseException as exc:
            ready.put(exc)
            raise

    thread = threading.Thread(target=trio.run, args=(serve,), name=f"names-{request.param}")
    thread.start()
    started = ready.get(timeout=60)
    if isinstance(started, BaseException):
        thread.join(timeout=30)
        raise started
    base_url, store, token, stop = started
    try:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            yield Served(request.param, client, store)
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=60)
        assert not thread.is_alive()


def enc(name: str) -> str:
    """A path segment for ``name``: every byte but letters, digits, ``-`` and ``_`` percent-encoded (so
    neither the client nor the server's router reads ``.``, ``+`` or ``/`` specially)."""
    return quote(name, safe="").replace(".", "%2E").replace("~", "%7E")


def valid(check: Callable[[], object]) -> bool:
    try:
        check()
    except InvalidTopicNameError:
        return False
    return True


def refused_before_the_store(served: Served, name: str, call: Callable[[], httpx.Response]) -> None:
    start = served.store.count()
    answer = call()
    assert answer.status_code == 412, (name, answer.status_code, answer.text)
    forms = {name, url_encode(name), quote(name, safe="")}
    for path in served.store.since(start):
        assert not forms & set(path.split("/")), f"{name!r} reached the store at {path!r}"


def with_controls(base: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda text, c, at: text[:at] + c + text[at:], base, st.sampled_from(CONTROL), st.integers(0, 40)
    )


ENTITY_CHARS = "-=:._abcXYZ019"
entity_names = st.one_of(
    st.text(alphabet=ENTITY_CHARS, min_size=1, max_size=12),
    st.sampled_from([".", "..", "...", "a" * 128, "a" * 129, "t:=.-_"]),
    st.text(min_size=1, max_size=12),
    with_controls(st.text(alphabet=ENTITY_CHARS, max_size=8)),
)
free_names = st.one_of(
    st.text(min_size=1, max_size=24),
    st.text(alphabet=st.characters(max_codepoint=0xFF), min_size=1, max_size=16),
    st.sampled_from([".", "..", "...", " ", "a b", "%41", "+", "x" * 1024, "x" * 1025, "%" * 682, "%" * 683]),
    with_controls(st.text(max_size=12)),
)
EXAMPLE_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@EXAMPLE_SETTINGS
@given(name=entity_names)
def test_tenant_names(served: Served, name: str) -> None:
    path = f"/admin/v2/tenants/{enc(name)}"
    if any(c in name for c in CONTROL):
        assert not valid(lambda: check_named_entity("tenant", name))
    if not valid(lambda: check_named_entity("tenant", name)):
        refused_before_the_store(served, name, lambda: served.client.put(path, json=TENANT_BODY))
        return
    created = served.client.put(path, json=TENANT_BODY)
    assert created.status_code in (204, 409), created.text
    assert name in served.client.get("/admin/v2/tenants").json()
    assert served.client.get(path).json()["allowedClusters"] == ["standalone"]
    if name != "public":
        assert served.client.delete(path).status_code == 204
        assert name not in served.client.get("/admin/v2/tenants").json()


@EXAMPLE_SETTINGS
@given(name=entity_names)
def test_namespace_names(served: Served, name: str) -> None:
    path = f"/admin/v2/namespaces/public/{enc(name)}"
    if not valid(lambda: check_named_entity("namespace", name)):
        refused_before_the_store(served, name, lambda: served.client.put(path))
        return
    created = served.client.put(path)
    assert created.status_code in (204, 409), created.text
    assert f"public/{name}" in served.client.get("/admin/v2/namespaces/public").json()
    assert served.client.get(path).status_code == 200
    if name != "default":
        assert served.client.delete(path).status_code == 204
        assert f"public/{name}" not in served.client.get("/admin/v2/namespaces/public").json()


def _topic_valid(name: str) -> bool:
    return valid(lambda: TopicName.of("public", "default", name))


@EXAMPLE_SETTINGS
@given(name=free_names)
def test_topic_names(served: Served, name: str) -> None:
    assume(PARTITIONED_TOPIC_SUFFIX not in name)
    path = f"{NS}/{enc(name)}"
    if any(c in name for c in CONTROL):
        assert not _topic_valid(name)
    if not _topic_valid(name):
        refused_before_the_store(served, name, lambda: served.client.put(path))
        return
    assert served.client.put(path).status_code == 204
    full = f"persistent://public/default/{name}"
    assert full in served.client.get(NS).json()
    stats = served.client.get(f"{path}/internalStats")
    assert stats.status_code == 200, stats.text
    assert served.client.delete(path).status_code == 204
    assert full not in served.client.get(NS).json()


@EXAMPLE_SETTINGS
@given(name=free_names)
def test_partitioned_topic_names(served: Served, name: str) -> None:
    assume(PARTITIONED_TOPIC_SUFFIX not in name)
    path = f"{NS}/{enc(name)}/partitions"
    if not _topic_valid(name) or not valid(lambda: TopicName.of("public", "default", name).partition(1)):
        refused_before_the_store(served, name, lambda: served.client.put(path, json=2))
        return
    assert served.client.put(path, json=2).status_code == 204
    full = f"persistent://public/default/{name}"
    assert full in served.client.get(f"{NS}/partitioned").json()
    assert f"{full}-partition-1" in served.client.get(NS).json()
    assert served.client.get(path).json()["partitions"] == 2
    assert served.client.delete(path).status_code == 204
    assert full not in served.client.get(f"{NS}/partitioned").json()


@EXAMPLE_SETTINGS
@given(name=free_names)
def test_subscription_names(served: Served, name: str) -> None:
    topic = f"{NS}/subscribed"
    path = f"{topic}/subscription/{enc(name)}"
    if any(c in name for c in CONTROL):
        assert not valid(lambda: check_subscription_name(name))
    if not valid(lambda: check_subscription_name(name)):
        refused_before_the_store(served, name, lambda: served.client.put(path, json="earliest"))
        return
    created = served.client.put(path, json="earliest")
    assert created.status_code == 204, created.text
    assert name in served.client.get(f"{topic}/subscriptions").json()
    assert name in served.client.get(f"{topic}/stats").json()["subscriptions"]
    assert served.client.delete(path).status_code == 204
    assert name not in served.client.get(f"{topic}/subscriptions").json()
