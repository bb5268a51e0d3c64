"""Opening a managed ledger - also how a new owner takes a topic over (Pulsar's ``initialize``).

1. Read the ledger list (create it if the managed ledger is new).
2. Open the *last* ledger with recovery: this fences it on the bookies, so a previous owner that is still
   alive can no longer add to it, and fixes its last entry. Record its entry count, size and close time.
   A ledger that no longer exists is dropped. So is every ledger listed as *open* (no entry count): a
   rollover lists the next ledger while its writer still writes the current one (see :mod:`.ledger`), so
   both may hold entries, and both are fenced.
3. Drop ledgers without entries (deleted from the bookies after the list is written).
4. Unless the managed ledger is terminated, create a new ledger and CAS-write the list. A version conflict
   means another owner got there first: this open fails and nothing was written.
5. Recover the cursors (each one CAS-claims its metadata node and recovers its cursor ledger with fencing).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import trio

from magnetar.bookkeeper.client import BKError, NoSuchLedgerError
from magnetar.managed_ledger.cursor_store import CursorStore
from magnetar.managed_ledger.errors import (
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
    MetadataConflictError,
)
from magnetar.managed_ledger.info import LedgerInfo, ManagedLedgerInfo
from magnetar.managed_ledger.ledger import Context, ManagedLedger, create_bk_ledger
from magnetar.managed_ledger.ledger_list import LedgerList

log = logging.getLogger(__name__)


async def open_managed_ledger(name: str, ctx: Context, *, create: bool = True) -> ManagedLedger:
    """Run the open sequence; the caller starts ``ml.run`` in a nursery before using it."""
    meta = ctx.meta
    with trio.fail_after(ctx.settings.metadata_operation_timeout_s):
        versioned = await meta.get_ledger_info(name)
    if versioned is None:
        if not create:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} does not exist")
        info, version = ManagedLedgerInfo(), -1
    else:
        info, version = versioned.value, versioned.version
    ledgers = list(info.ledgers)
    for index, listed in enumerate(ledgers):
        if index == len(ledgers) - 1 or listed.entries == 0:
            ledgers[index] = await _recover_ledger(name, ctx, listed)
    dropped = [i.ledger_id for i in ledgers if i.entries == 0]
    kept = [i for i in ledgers if i.entries > 0]
    handle = None
    if info.terminated_position is None:
        handle = await create_bk_ledger(ctx, name)
        kept.append(LedgerInfo(handle.ledger_id))
    new_info = ManagedLedgerInfo(tuple(kept), info.terminated_position, dict(info.properties))
    try:
        version = await meta.put_ledger_info(name, new_info, version)
    except MetadataConflictError as exc:
        if handle is not None:
            await _delete_quietly(ctx, handle.ledger_id)
        raise ManagedLedgerFencedError(f"managed ledger {name} was opened elsewhere: {exc}") from exc
    for ledger_id in dropped:
        await _delete_quietly(ctx, ledger_id)
    ml = ManagedLedger(
        name, ctx, LedgerList(kept), version, handle, info.terminated_position, dict(info.properties)
    )
    await _recover_cursors(ml, ctx)
    log.info(
        "managed ledger %s opened: %d ledgers, %d entries, writing to ledger %s",
        name,
        len(kept),
        ml.number_of_entries(),
        handle.ledger_id if handle else "none (terminated)",
    )
    return ml


async def _recover_ledger(name: str, ctx: Context, last: LedgerInfo) -> LedgerInfo:
    try:
        with trio.fail_after(ctx.settings.metadata_operation_timeout_s):
            handle = await ctx.bk.open_ledger(
                last.ledger_id, password=ctx.settings.password, recovery=True, use_stored_password=True
            )
    except NoSuchLedgerError:
        log.warning("managed ledger %s: ledger %d no longer exists; dropping it", name, last.ledger_id)
        return replace(last, entries=0, size_bytes=0)
    try:
        recovered = replace(
            last,
            entries=handle.last_add_confirmed + 1,
            size_bytes=handle.length,
            timestamp_ms=last.timestamp_ms or ctx.clock.time_ms(),
        )
    finally:
        await handle.close()
    log.info(
        "managed ledger %s: recovered ledger %d with %d entries", name, last.ledger_id, recovered.entries
    )
    return recovered


async def _recover_cursors(ml: ManagedLedger, ctx: Context) -> None:
    for cursor in await ctx.meta.list_cursors(ml.name):
        try:
            recovered = await CursorStore.recover(
                ml.name, cursor, ctx.bk, ctx.meta, ctx.settings, ctx.clock.time_ms()
            )
        except MetadataConflictError as exc:
            raise ManagedLedgerFencedError(f"cursor {cursor} claimed elsewhere: {exc}") from exc
        if recovered is None:
            continue
        store, snapshot = recovered
        ml.attach_recovered_cursor(cursor, store, snapshot)


async def _delete_quietly(ctx: Context, ledger_id: int) -> None:
    try:
        await ctx.bk.delete_ledger(ledger_id)
    except (BKError, ManagedLedgerError) as exc:
        log.warning("deleting ledger %d failed: %s", ledger_id, exc)
