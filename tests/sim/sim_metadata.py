"""The simulation's metadata store: one shared memory tree, seen by each client through a wrapper that adds
random delays (so metadata operations interleave), injects spurious compare-and-set conflicts, and checks
every ledger-metadata transition against BookKeeper's state machine (states, closed end, ensembles;
docs/upstream.md, BookKeeper §1.2, invariant 4 of docs/architecture.md §3) and the rule that only AutoRecovery
re-writes earlier ensembles."""

from __future__ import annotations

import random
from collections.abc import Callable

import trio

from magnetar.bookkeeper.client.metadata import LedgerMetadata, LedgerState
from magnetar.bookkeeper.metadata.api import (
    BadVersionError,
    GetResult,
    NotificationListener,
    SessionListener,
    Stat,
    Unregister,
)
from magnetar.bookkeeper.metadata.health import MetadataHealth
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore

_LEGAL = {
    (LedgerState.OPEN, LedgerState.OPEN),
    (LedgerState.OPEN, LedgerState.IN_RECOVERY),
    (LedgerState.OPEN, LedgerState.CLOSED),
    (LedgerState.IN_RECOVERY, LedgerState.IN_RECOVERY),
    (LedgerState.IN_RECOVERY, LedgerState.CLOSED),
    (LedgerState.CLOSED, LedgerState.CLOSED),
}


def check_transition(old: LedgerMetadata | None, new: LedgerMetadata, client: str = "") -> str | None:
    """A description of what is illegal about ``old -> new`` written by ``client``, or None.

    Only the writer and recovering clients add or replace the *last* ensemble; only AutoRecovery's daemons
    (clients named ``daemon*``) change the bookies of an earlier ensemble - or of a closed ledger's last -
    and they never touch the open last fragment except through a ledger recovery of their own."""
    if old is None:
        return None if new.state is LedgerState.OPEN else f"created in state {new.state.name}"
    if (old.state, new.state) not in _LEGAL:
        return f"illegal transition {old.state.name} -> {new.state.name}"
    if old.is_closed and (old.last_entry_id, old.length) != (new.last_entry_id, new.length):
        before, after = (old.last_entry_id, old.length), (new.last_entry_id, new.length)
        return f"closed end changed from {before} to {after}"
    old_keys = [first for first, _ in old.ensembles]
    new_keys = [first for first, _ in new.ensembles]
    if new_keys[: len(old_keys) - 1] != old_keys[:-1]:
        return "earlier ensembles were removed or moved"
    replicator = client.startswith("daemon")
    for (_, before), (_, after) in zip(old.ensembles[:-1], new.ensembles, strict=False):
        if before != after and not replicator:
            return "earlier ensembles were rewritten"
    open_fragment_changed = new.ensembles[len(old.ensembles) - 1 :] != old.ensembles[-1:]
    if replicator and not old.is_closed and old.state is new.state and open_fragment_changed:
        return "re-replication touched the open last fragment"
    return None


class SimMetadataStore:
    def __init__(
        self,
        inner: MemoryMetadataStore,
        rng: random.Random,
        *,
        client: str,
        delay_max_s: float,
        conflict: float,
        on_write: Callable[[str, str, LedgerMetadata | None, LedgerMetadata], None],
    ) -> None:
        self._inner = inner
        self._rng = rng
        self._client = client
        self._delay_max_s = delay_max_s
        self._conflict = conflict
        self._on_write = on_write

    async def _delay(self) -> None:
        await trio.sleep(self._rng.uniform(0.0, self._delay_max_s))

    async def get(self, path: str) -> GetResult | None:
        await self._delay()
        return await self._inner.get(path)

    async def get_children(self, path: str) -> list[str]:
        await self._delay()
        return await self._inner.get_children(path)

    async def exists(self, path: str) -> bool:
        await self._delay()
        return await self._inner.exists(path)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        await self._delay()
        if expected_version is not None and expected_version >= 0 and self._rng.random() < self._conflict:
            raise BadVersionError(f"{path}: injected conflict")
        is_ledger = path.rsplit("/", 1)[-1].startswith("L")
        old = await self._inner.get(path) if is_ledger else None
        stat = await self._inner.put(
            path, value, expected_version, ephemeral=ephemeral, sequential=sequential
        )
        if is_ledger:
            before = LedgerMetadata.from_bytes(old.value) if old is not None else None
            self._on_write(self._client, path, before, LedgerMetadata.from_bytes(value))
        await self._delay()
        return stat

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await self._delay()
        await self._inner.delete(path, expected_version)

    async def delete_recursive(self, path: str) -> None:
        await self._delay()
        await self._inner.delete_recursive(path)

    def register_listener(self, listener: NotificationListener) -> Unregister:
        return self._inner.register_listener(listener)

    def register_session_listener(self, listener: SessionListener) -> Unregister:
        return self._inner.register_session_listener(listener)

    @property
    def health(self) -> MetadataHealth:
        """The shared tree's: the simulation's clients see no outage of their own."""
        return self._inner.health

    async def aclose(self) -> None:
        """The shared tree outlives each client's view of it."""
