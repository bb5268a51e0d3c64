"""What the managed ledgers of one factory share, and how one of them gets a new BookKeeper ledger.

:class:`Context` is built once by the factory (:mod:`.factory`) and handed to every managed ledger it opens:
the BookKeeper client, the metadata store, the settings, the shared entry cache, the clock and randomness
seams, the retention hook, the metadata store's health signal and the entry indexing.
:func:`create_bk_ledger` is the one place a managed ledger's data ledgers are created (by the open sequence
and by every switch to a new ledger; cursor ledgers are :mod:`.cursor_store`'s), with the settings'
replication and password and the managed ledger's name in the ledger's custom metadata.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.client import BookKeeper, LedgerHandle
from magnetar.bookkeeper.metadata import MetadataHealth
from magnetar.bookkeeper.runtime import Clock
from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.entry_prefix import EntryIndexing
from magnetar.managed_ledger.meta_store import MetaStore
from magnetar.managed_ledger.settings import ManagedLedgerSettings

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger import ManagedLedger


@dataclass(frozen=True, slots=True)
class Context:
    """What every managed ledger of a factory shares."""

    bk: BookKeeper
    meta: MetaStore
    settings: ManagedLedgerSettings
    cache: EntryCache
    clock: Clock
    rng: random.Random
    on_trim_candidate: Callable[[ManagedLedger], None]
    """Called after a rollover and when the slowest cursor enters a new ledger (retention may trim)."""
    health: MetadataHealth | None = None
    """The metadata store's health: rollovers are deferred while it is unhealthy (None: no such signal)."""
    entry_indexing: EntryIndexing | None = None
    """Set: entries carry their first message's index in the managed ledger's prefix (:mod:`.entry_prefix`);
    None: they carry none (counts live in memory)."""


Quorum = tuple[int, int, int]
"""Ensemble size, write quorum, ack quorum of a new ledger."""


async def create_bk_ledger(ctx: Context, name: str, quorum: Quorum | None = None) -> LedgerHandle:
    """A new ledger for managed ledger ``name`` (its name recorded in the ledger's custom metadata), with
    ``quorum`` (the topic's persistence policy) or else the settings' quorum."""
    s = ctx.settings
    ensemble, write, ack = quorum if quorum is not None else (s.ensemble_size, s.write_quorum, s.ack_quorum)
    with trio.fail_after(s.metadata_operation_timeout_s):
        return await ctx.bk.create_ledger(
            ensemble_size=ensemble,
            write_quorum=write,
            ack_quorum=ack,
            digest_type=s.digest_type,
            password=s.password,
            custom_metadata={"pulsar/managed-ledger": name.encode()},
        )
