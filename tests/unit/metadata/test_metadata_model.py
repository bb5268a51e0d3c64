"""Property test: the memory and RocksDB backends agree with a small model of the contract.

Random sequences of put / CAS / delete / delete_recursive (and, for RocksDB, restarts) run against both
stores and a dictionary model; every outcome (new version or error type) and the whole tree after each step
must match. Few paths, so parents, NotEmpty and version conflicts come up often.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.bookkeeper.metadata import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.metadata.rocksdb_store import RocksDbMetadataStore

PATHS = ["/a", "/a/b", "/a/c", "/a/b/d", "/b"]
TREE = ["/", *PATHS]

Outcome = tuple[str, Any]


@dataclass
class Model:
    nodes: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def children(self, path: str) -> list[str]:
        prefix = "/" if path == "/" else path + "/"
        return sorted(
            p[len(prefix) :] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix) :]
        )

    def put(self, path: str, value: bytes, expected: int | None) -> Outcome:
        current = self.nodes.get(path)
        if expected == -1 and current is not None:
            return ("error", BadVersionError)
        if expected is not None and expected >= 0 and (current is None or current[1] != expected):
            return ("error", BadVersionError)
        parent = path.rsplit("/", 1)[0]
        while parent and parent not in self.nodes:
            self.nodes[parent] = (b"", 0)
            parent = parent.rsplit("/", 1)[0]
        version = 0 if current is None else current[1] + 1
        self.nodes[path] = (value, version)
        return ("ok", version)

    def delete(self, path: str, expected: int | None) -> Outcome:
        current = self.nodes.get(path)
        if current is None:
            return ("error", NotFoundError)
        if expected is not None and current[1] != expected:
            return ("error", BadVersionError)
        if self.children(path):
            return ("error", NotEmptyError)
        del self.nodes[path]
        return ("ok", None)

    def delete_recursive(self, path: str) -> Outcome:
        for node in [p for p in self.nodes if p == path or p.startswith(path + "/")]:
            del self.nodes[node]
        return ("ok", None)


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(PATHS),
            st.binary(max_size=4),
            st.sampled_from([None, -1, 0, 1, 2]),
        ),
        st.tuples(st.just("delete"), st.sampled_from(PATHS), st.sampled_from([None, 0, 1])),
        st.tuples(st.just("delete_recursive"), st.sampled_from(PATHS)),
        st.tuples(st.just("restart")),
    ),
    max_size=30,
)


async def _apply(store: MetadataStore, operation: tuple[Any, ...]) -> Outcome:
    try:
        if operation[0] == "put":
            return ("ok", (await store.put(operation[1], operation[2], operation[3])).version)
        if operation[0] == "delete":
            await store.delete(operation[1], operation[2])
        else:
            await store.delete_recursive(operation[1])
    except MetadataStoreError as exc:
        return ("error", type(exc))
    return ("ok", None)


def _model_apply(model: Model, operation: tuple[Any, ...]) -> Outcome:
    if operation[0] == "put":
        return model.put(operation[1], operation[2], operation[3])
    if operation[0] == "delete":
        return model.delete(operation[1], operation[2])
    return model.delete_recursive(operation[1])


async def _snapshot(store: MetadataStore) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in TREE:
        got = await store.get(path)
        tree[path] = (None if got is None else (got.value, got.stat.version), await store.get_children(path))
    return tree


def _model_snapshot(model: Model) -> dict[str, Any]:
    return {
        path: (model.nodes.get(path, (b"", 0) if path == "/" else None), model.children(path))
        for path in TREE
    }


async def _check(ops: list[tuple[Any, ...]], directory: Path) -> None:
    model = Model()
    memory: MetadataStore = MemoryMetadataStore()
    rocksdb = RocksDbMetadataStore.open(directory)
    try:
        for step, operation in enumerate(ops):
            if operation[0] == "restart":
                await rocksdb.aclose()
                rocksdb = RocksDbMetadataStore.open(directory)
                continue
            expected = _model_apply(model, operation)
            for store in (memory, rocksdb):
                assert await _apply(store, operation) == expected, (step, operation, type(store).__name__)
                assert await _snapshot(store) == _model_snapshot(model), (
                    step,
                    operation,
                    type(store).__name__,
                )
    finally:
        await rocksdb.aclose()
        await memory.aclose()


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_memory_and_rocksdb_agree_with_the_model(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory(prefix="metadata-model-") as directory:
        trio.run(_check, ops, Path(directory))
