"""Scripted interleavings (BookKeeper's ``MockBookies`` with pre-read/pre-write hooks): in-process bookies
whose requests or responses can be held for one client and one bookie until the test releases them, and a
metadata store whose ledger writes can be held the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from magnetar.bookkeeper.client.local_transport import LocalTransport
from magnetar.bookkeeper.client.transport import ResponseCallback
from magnetar.bookkeeper.metadata.api import (
    GetResult,
    NotificationListener,
    SessionListener,
    Stat,
    Unregister,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.messages import AddRequest, ReadRequest, Request, Response

Match = Callable[[Request], bool]


def add_of(entry_id: int | None = None) -> Match:
    return lambda r: isinstance(r, AddRequest) and (entry_id is None or r.entry_id == entry_id)


def adds_from(first_entry_id: int) -> Match:
    return lambda r: isinstance(r, AddRequest) and r.entry_id >= first_entry_id


def read_of(entry_id: int | None = None, *, fence: bool | None = None) -> Match:
    return lambda r: (
        isinstance(r, ReadRequest)
        and (entry_id is None or r.entry_id == entry_id)
        and (fence is None or r.fence == fence)
    )


@dataclass
class Hold:
    bookie: str
    match: Match
    responses: bool
    held: list[tuple[Callable[..., None], tuple[object, ...]]] = field(default_factory=list)
    active: bool = True
    arrived: trio.Event = field(default_factory=trio.Event)

    def release(self) -> None:
        """Let everything held go on (in order) and stop holding."""
        self.active = False
        held, self.held = self.held, []
        for fn, args in held:
            fn(*args)

    def drop(self) -> None:
        """Forget what was held (as if lost) and stop holding. Its callbacks never run."""
        self.active = False
        self.held = []


class ScriptedTransport:
    """One client's transport over shared in-process bookies, with holds."""

    def __init__(self, inner: LocalTransport) -> None:
        self._inner = inner
        self._holds: list[Hold] = []

    def hold(self, bookie: str, match: Match, *, responses: bool = False) -> Hold:
        hold = Hold(bookie, match, responses)
        self._holds.append(hold)
        return hold

    def _active(self, bookie: str, request: Request, responses: bool) -> Hold | None:
        for hold in self._holds:
            if hold.active and hold.responses == responses and hold.bookie == bookie and hold.match(request):
                return hold
        return None

    def send(self, bookie: str, request: Request, callback: ResponseCallback) -> None:
        hold = self._active(bookie, request, responses=False)
        if hold is not None:
            hold.held.append((self._send_on, (bookie, request, callback)))
            hold.arrived.set()
            return
        self._send_on(bookie, request, callback)

    def _send_on(self, bookie: str, request: Request, callback: ResponseCallback) -> None:
        def on_answer(answer: Response | object) -> None:
            hold = self._active(bookie, request, responses=True)
            if hold is not None:
                hold.held.append((callback, (answer,)))
                hold.arrived.set()
                return
            callback(answer)  # type: ignore[arg-type]

        self._inner.send(bookie, request, on_answer)


class GatedMetadataStore:
    """A view of a memory store whose writes to ledger nodes can be held (``gate``) until released."""

    def __init__(self, inner: MemoryMetadataStore) -> None:
        self._inner = inner
        self.gate: trio.Event | None = None
        self.waiting = trio.Event()
        self.ledger_writes: list[str] = []

    async def get(self, path: str) -> GetResult | None:
        return await self._inner.get(path)

    async def get_children(self, path: str) -> list[str]:
        return await self._inner.get_children(path)

    async def exists(self, path: str) -> bool:
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
        if path.rsplit("/", 1)[-1].startswith("L"):
            if self.gate is not None:
                self.waiting.set()
                await self.gate.wait()
            self.ledger_writes.append(value.decode().split('"state": "')[1].split('"')[0])
        return await self._inner.put(
            path, value, expected_version, ephemeral=ephemeral, sequential=sequential
        )

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await self._inner.delete(path, expected_version)

    async def delete_recursive(self, path: str) -> None:
        await self._inner.delete_recursive(path)

    def register_listener(self, listener: NotificationListener) -> Unregister:
        return self._inner.register_listener(listener)

    def register_session_listener(self, listener: SessionListener) -> Unregister:
        return self._inner.register_session_listener(listener)

    async def aclose(self) -> None:
        """The shared store outlives this view."""
