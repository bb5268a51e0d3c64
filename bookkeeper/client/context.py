"""What every client operation shares: settings, metadata access, placement, the bookie client, seams.

One :class:`ClientContext` belongs to one :class:`~.bookkeeper.BookKeeper`; its background work (ensemble
changes, closes after failures) runs in the client's nursery through :meth:`ClientContext.spawn`, which logs
and swallows failures so that one ledger's trouble never takes the client down.
"""

from __future__ import annotations

import logging
import random
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from magnetar.bookkeeper.client.bookie_client import BookieClient
from magnetar.bookkeeper.client.call_soon import CallSoon
from magnetar.bookkeeper.client.errors import BKError, ClientClosedError
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.client.placement import EnsemblePlacement
from magnetar.bookkeeper.client.settings import ClientSettings
from magnetar.bookkeeper.client.stats import ClientStats
from magnetar.bookkeeper.runtime import Clock

log = logging.getLogger(__name__)


class Failable(Protocol):
    def fail(self, error: BKError) -> None: ...


@dataclass(slots=True)
class ClientContext:
    settings: ClientSettings
    manager: LedgerManager
    placement: EnsemblePlacement
    rpc: BookieClient
    call_soon: CallSoon
    clock: Clock
    rng: random.Random
    nursery: trio.Nursery
    closed: bool = False
    stats: ClientStats = field(default_factory=ClientStats)
    writers: weakref.WeakValueDictionary[int, Failable] = field(default_factory=weakref.WeakValueDictionary)
    _writer_seq: int = 0

    def track_writer(self, writer: Failable) -> None:
        """Remember a live add pipeline so that closing the client fails its pending adds."""
        self._writer_seq += 1
        self.writers[self._writer_seq] = writer

    def fail_writers(self, error: BKError) -> None:
        for key in sorted(self.writers):
            writer = self.writers.get(key)
            if writer is not None:
                writer.fail(error)

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Run ``fn(*args)`` as background work of the client; exceptions are logged, not raised."""
        self.nursery.start_soon(_guarded, fn, args)

    def check_open(self) -> None:
        if self.closed:
            raise ClientClosedError("the BookKeeper client is closed")


async def _guarded(fn: Callable[..., Awaitable[object]], args: tuple[Any, ...]) -> None:
    try:
        await fn(*args)
    except Exception:
        log.exception("background client work %r failed", fn)
