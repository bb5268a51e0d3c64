"""The MetadataStore contract (``magnetar.bookkeeper.metadata.api``), run against every backend.

Each test gets a fresh tree: a private memory tree, a new RocksDB directory, or a new ZooKeeper chroot.
"""

from __future__ import annotations

import re
import time

import pytest
from fixtures.metadata import Backend, Recorder

from magnetar.bookkeeper.metadata import (
    METADATA_PATH_BYTES_MAX,
    METADATA_VALUE_BYTES_MAX,
    BadVersionError,
    InvalidPathError,
    MetadataStore,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationType,
    StoreUnavailableError,
    ValueTooLargeError,
)

CREATED = NotificationType.CREATED
MODIFIED = NotificationType.MODIFIED
DELETED = NotificationType.DELETED
CHILDREN = NotificationType.CHILDREN_CHANGED
SEQUENTIAL_NAME = re.compile(r"^/q/item-(\d{10})$")


# -- get / put / compare-and-set ------------------------------------------------------------------------


async def test_get_missing_node_is_none(store: MetadataStore) -> None:
    assert await store.get("/missing") is None
    assert await store.get("/missing/deeper") is None


async def test_put_creates_node_at_version_zero(store: MetadataStore) -> None:
    stat = await store.put("/a", b"one", None)
    assert (stat.path, stat.version, stat.ephemeral) == ("/a", 0, False)
    got = await store.get("/a")
    assert got is not None
    assert got.value == b"one"
    assert got.stat == stat


async def test_unconditional_put_overwrites_and_increments_version(store: MetadataStore) -> None:
    versions = [(await store.put("/a", f"v{i}".encode(), None)).version for i in range(3)]
    assert versions == [0, 1, 2]
    got = await store.get("/a")
    assert got is not None
    assert (got.value, got.stat.version) == (b"v2", 2)


async def test_put_minus_one_creates_only(store: MetadataStore) -> None:
    assert (await store.put("/a", b"first", -1)).version == 0
    with pytest.raises(BadVersionError):
        await store.put("/a", b"second", -1)
    got = await store.get("/a")
    assert got is not None
    assert (got.value, got.stat.version) == (b"first", 0)


async def test_put_expected_version_is_compare_and_set(store: MetadataStore) -> None:
    await store.put("/a", b"v0", -1)
    assert (await store.put("/a", b"v1", 0)).version == 1
    with pytest.raises(BadVersionError):
        await store.put("/a", b"stale", 0)
    with pytest.raises(BadVersionError):
        await store.put("/a", b"future", 5)
    assert (await store.put("/a", b"v2", 1)).version == 2
    got = await store.get("/a")
    assert got is not None
    assert got.value == b"v2"


async def test_put_expected_version_on_missing_node_is_bad_version(store: MetadataStore) -> None:
    with pytest.raises(BadVersionError):
        await store.put("/missing", b"x", 0)
    assert not await store.exists("/missing")


async def test_put_rejects_expected_version_below_minus_one(store: MetadataStore) -> None:
    with pytest.raises(ValueError, match="expected_version"):
        await store.put("/a", b"x", -2)


async def test_stat_times(store: MetadataStore) -> None:
    before_ms = time.time_ns() // 1_000_000
    created = await store.put("/a", b"x", None)
    assert created.creation_time_ms == created.modification_time_ms
    # Stamped by the backend's clock (the ZooKeeper server's for zk): the same machine's wall clock.
    assert abs(created.creation_time_ms - before_ms) < 600_000
    updated = await store.put("/a", b"y", None)
    assert updated.creation_time_ms == created.creation_time_ms
    assert updated.modification_time_ms >= created.modification_time_ms
    got = await store.get("/a")
    assert got is not None
    assert got.stat == updated


# -- tree structure -------------------------------------------------------------------------------------


async def test_put_creates_missing_parents_as_empty_persistent_nodes(store: MetadataStore) -> None:
    await store.put("/a/b/c", b"leaf", None)
    for parent in ("/a", "/a/b"):
        got = await store.get(parent)
        assert got is not None
        assert (got.value, got.stat.version, got.stat.ephemeral) == (b"", 0, False)
    assert await store.get_children("/a") == ["b"]
    assert await store.get_children("/a/b") == ["c"]


async def test_children_are_sorted_and_empty_for_missing_or_leaf(store: MetadataStore) -> None:
    for name in ("b", "a1", "c", "a", "B"):
        await store.put(f"/p/{name}", b"", None)
    assert await store.get_children("/p") == ["B", "a", "a1", "b", "c"]
    assert await store.get_children("/p/a") == []
    assert await store.get_children("/missing") == []


async def test_exists(store: MetadataStore) -> None:
    assert not await store.exists("/a")
    await store.put("/a/b", b"", None)
    assert await store.exists("/a")
    assert await store.exists("/a/b")
    assert not await store.exists("/a/c")


async def test_delete_checks_existence_and_version(store: MetadataStore) -> None:
    with pytest.raises(NotFoundError):
        await store.delete("/a")
    await store.put("/a", b"x", None)
    await store.put("/a", b"y", None)
    with pytest.raises(BadVersionError):
        await store.delete("/a", 0)
    with pytest.raises(BadVersionError):
        await store.delete("/a", -1)
    assert await store.exists("/a")
    await store.delete("/a", 1)
    assert not await store.exists("/a")
    await store.put("/b", b"", None)
    await store.delete("/b")
    assert not await store.exists("/b")
    assert await store.get_children("/") == []


async def test_delete_refuses_node_with_children(store: MetadataStore) -> None:
    await store.put("/a/b", b"", None)
    with pytest.raises(NotEmptyError):
        await store.delete("/a")
    assert await store.exists("/a/b")


async def test_delete_recursive_removes_subtree_only(store: MetadataStore) -> None:
    for path in ("/a/b/c", "/a/b/d", "/a/e", "/ab", "/z"):
        await store.put(path, b"x", None)
    await store.delete_recursive("/a")
    assert await store.get_children("/") == ["ab", "z"]
    assert not await store.exists("/a/b/c")
    await store.delete_recursive("/missing")
    await store.delete_recursive("/ab")
    assert await store.get_children("/") == ["z"]


async def test_root_cannot_be_written_or_deleted(store: MetadataStore) -> None:
    with pytest.raises(InvalidPathError):
        await store.put("/", b"x", None)
    with pytest.raises(InvalidPathError):
        await store.delete("/")
    with pytest.raises(InvalidPathError):
        await store.delete_recursive("/")


# -- ephemeral and sequential nodes ----------------------------------------------------------------------


async def test_ephemeral_node_cannot_have_children(store: MetadataStore) -> None:
    stat = await store.put("/owner", b"me", -1, ephemeral=True)
    assert stat.ephemeral
    got = await store.get("/owner")
    assert got is not None
    assert got.stat.ephemeral
    with pytest.raises(InvalidPathError):
        await store.put("/owner/child", b"", None)
    with pytest.raises(InvalidPathError):
        await store.put("/owner/deep/child", b"", None)
    with pytest.raises(InvalidPathError):
        await store.put("/owner/item-", b"", None, sequential=True)
    assert await store.get_children("/owner") == []
    assert await store.get_children("/") == ["owner"]


async def test_ephemeral_nodes_disappear_when_the_store_closes(backend: Backend) -> None:
    async with backend.open() as first:
        await first.put("/brokers/b1", b"ephemeral", -1, ephemeral=True)
        await first.put("/brokers/b1-persistent", b"stays", -1)
        await first.put("/seq/e-", b"", None, ephemeral=True, sequential=True)
        assert await first.exists("/brokers/b1")
    async with backend.open() as second:
        assert not await second.exists("/brokers/b1")
        assert await second.get_children("/brokers") == ["b1-persistent"]
        assert await second.get_children("/seq") == []
        got = await second.get("/brokers/b1-persistent")
        assert got is not None
        assert got.value == b"stays"


async def test_sequential_names_are_ten_digit_and_increasing(store: MetadataStore) -> None:
    suffixes = []
    for i in range(4):
        stat = await store.put("/q/item-", f"{i}".encode(), None, sequential=True)
        match = SEQUENTIAL_NAME.match(stat.path)
        assert match is not None, stat.path
        suffixes.append(int(match.group(1)))
        got = await store.get(stat.path)
        assert got is not None
        assert got.value == f"{i}".encode()
        await store.put(f"/q/other-{i}", b"", None)  # other children must not break monotonicity
    assert suffixes == sorted(set(suffixes))
    ephemeral = await store.put("/q/item-", b"", None, ephemeral=True, sequential=True)
    assert ephemeral.ephemeral
    match = SEQUENTIAL_NAME.match(ephemeral.path)
    assert match is not None
    assert int(match.group(1)) > suffixes[-1]


async def test_sequential_counters_are_per_parent(store: MetadataStore) -> None:
    first = await store.put("/x/n-", b"", None, sequential=True)
    second = await store.put("/y/n-", b"", None, sequential=True)
    assert first.path.removeprefix("/x/") == second.path.removeprefix("/y/")


# -- notifications -------------------------------------------------------------------------------------


async def test_notifications_for_create_modify_delete(store: MetadataStore) -> None:
    recorder: Recorder[Notification] = Recorder()
    store.register_listener(recorder)
    await store.put("/n/a", b"1", None)
    await recorder.wait_for_all(
        [
            Notification(CREATED, "/n"),
            Notification(CHILDREN, "/"),
            Notification(CREATED, "/n/a"),
            Notification(CHILDREN, "/n"),
        ]
    )
    await store.put("/n/a", b"2", 0)
    await store.delete("/n/a")
    await recorder.wait_for_sequence(
        [Notification(CREATED, "/n/a"), Notification(MODIFIED, "/n/a"), Notification(DELETED, "/n/a")]
    )
    await recorder.wait_for_all([Notification(CHILDREN, "/n")])
    assert recorder.events.count(Notification(CHILDREN, "/n")) == 2


async def test_delete_recursive_notifies_every_node(store: MetadataStore) -> None:
    await store.put("/r/a/b", b"", None)
    recorder: Recorder[Notification] = Recorder()
    store.register_listener(recorder)
    await store.delete_recursive("/r")
    await recorder.wait_for_all(
        [
            Notification(DELETED, "/r/a/b"),
            Notification(DELETED, "/r/a"),
            Notification(DELETED, "/r"),
            Notification(CHILDREN, "/"),
        ]
    )


async def test_unregistered_listener_hears_nothing(store: MetadataStore) -> None:
    kept: Recorder[Notification] = Recorder()
    dropped: Recorder[Notification] = Recorder()
    store.register_listener(kept)
    unregister = store.register_listener(dropped)
    unregister()
    unregister()  # idempotent
    await store.put("/u", b"", None)
    await kept.wait_for_all([Notification(CREATED, "/u")])
    assert dropped.events == []


async def test_a_failing_listener_does_not_stop_the_others(store: MetadataStore) -> None:
    def failing(event: Notification) -> None:
        raise RuntimeError(f"listener bug on {event}")

    recorder: Recorder[Notification] = Recorder()
    store.register_listener(failing)
    store.register_listener(recorder)
    await store.put("/f", b"", None)
    await recorder.wait_for_all([Notification(CREATED, "/f")])


async def test_other_sessions_see_changes(shared_backend: Backend) -> None:
    async with shared_backend.open() as watcher, shared_backend.open() as writer:
        recorder: Recorder[Notification] = Recorder()
        watcher.register_listener(recorder)
        await writer.put("/shared/x", b"1", None)
        await writer.put("/shared/x", b"2", None)
        await recorder.wait_for_sequence(
            [Notification(CREATED, "/shared/x"), Notification(MODIFIED, "/shared/x")]
        )
        got = await watcher.get("/shared/x")
        assert got is not None
        assert got.value == b"2"


# -- limits and invalid input ----------------------------------------------------------------------------


async def test_value_size_limit(store: MetadataStore) -> None:
    # The longest path allowed with the largest value: the request must still fit a stock ZooKeeper.
    path = "/big/" + "p" * (METADATA_PATH_BYTES_MAX - len("/big/"))
    largest = bytes(range(256)) * (METADATA_VALUE_BYTES_MAX // 256) + b"x" * (METADATA_VALUE_BYTES_MAX % 256)
    assert len(largest) == METADATA_VALUE_BYTES_MAX
    await store.put(path, largest, -1)
    got = await store.get(path)
    assert got is not None
    assert got.value == largest
    with pytest.raises(ValueTooLargeError):
        await store.put(path, largest + b"!", None)
    with pytest.raises(ValueTooLargeError):
        await store.put("/other", largest + b"!", -1)
    assert not await store.exists("/other")


INVALID_PATHS = [
    "",
    "relative",
    "a/b",
    "/trailing/",
    "//double",
    "/a//b",
    "/a/./b",
    "/a/..",
    "/nul\x00",
    "/control\x01",
    "/del\x7f",
    "/emoji\U0001f600",
    "/private\ue000",
    "/" + "x" * METADATA_PATH_BYTES_MAX,
]


async def test_invalid_paths_are_refused_by_every_operation(store: MetadataStore) -> None:
    for path in INVALID_PATHS:
        for operation in (
            store.get(path),
            store.exists(path),
            store.get_children(path),
            store.put(path, b"", None),
            store.delete(path),
            store.delete_recursive(path),
        ):
            with pytest.raises(InvalidPathError):
                await operation
    assert await store.get_children("/") == []


async def test_unicode_paths_round_trip(store: MetadataStore) -> None:
    await store.put("/tenant/ns/tópic-ü", b"x", None)
    assert await store.get_children("/tenant/ns") == ["tópic-ü"]


async def test_closed_store_is_unavailable(backend: Backend) -> None:
    async with backend.open() as store:
        await store.put("/a", b"", None)
    with pytest.raises(StoreUnavailableError):
        await store.get("/a")
    with pytest.raises(StoreUnavailableError):
        await store.put("/a", b"", None)
    await store.aclose()  # closing twice is harmless
