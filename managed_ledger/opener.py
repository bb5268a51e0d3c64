"""Opening a managed ledger - also how a new owner takes a topic over (Pulsar's ``initialize``).

1. Read the ledger list (create it if the managed ledger is new).
2. Open the *last* ledger with recovery: this fences it on the bookies, so a previous owner that is still
   alive can no longer add to it, and fixes its last entry. Record its entry count, size and close time.
   A ledger that no longer exists is dropped. Every ledger listed as *open* (no entry count) is recovered
   too: a rollover lists the next ledger while its writer still writes the current one (see
   :mod:`.ledger_switch`), so both may hold entries, and both are fenced.
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
from magnetar.managed_ledger.context import Context, Quorum, create_bk_ledger
from magnetar.managed_ledger.cursor_store import CursorStore
from magnetar.managed_ledger.entry_prefix import split
from magnetar.managed_ledger.errors import (
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
    MetadataConflictError,
)
from magnetar.managed_ledger.info import LedgerInfo, ManagedLedgerInfo
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position

log = logging.getLogger(__name__)


async def open_managed_ledger(
    name: str, ctx: Context, *, create: bool = True, quorum: Quorum | None = None
) -> ManagedLedger:
    """Run the open sequence; the caller starts ``ml.run`` in a nursery before using it. ``quorum``: of the
    ledger it creates, and of the ledgers it rolls over to (None: the settings')."""
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
    ends: dict[int, int] = {}
    """The index after the last message of each recovered ledger whose last entry carries its index."""
    for index, listed in enumerate(ledgers):
        if index == len(ledgers) - 1 or listed.entries == 0:
            ledgers[index], end = await _recover_ledger(name, ctx, listed)
            if end is not None:
                ends[listed.ledger_id] = end
    dropped = [i.ledger_id for i in ledgers if i.entries == 0]
    indexed, next_index = _first_indexes(ledgers, ends)  # an empty ledger's first index bounds the one before
    kept = [i for i in indexed if i.entries > 0]
    handle = None
    if info.terminated_position is None:
        handle = await create_bk_ledger(ctx, name, quorum)
        kept.append(LedgerInfo(handle.ledger_id, first_index=next_index))
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
        name,
        ctx,
        LedgerList(kept),
        version,
        handle,
        info.terminated_position,
        dict(info.properties),
        next_index,
    )
    ml.quorum = quorum
    await _recover_cursors(ml, ctx)
    log.info(
        "managed ledger %s opened: %d ledgers, %d entries, writing to ledger %s",
        name,
        len(kept),
        ml.number_of_entries(),
        handle.ledger_id if handle else "none (terminated)",
    )
    return ml


def _first_indexes(listed: list[LedgerInfo], ends: dict[int, int]) -> tuple[list[LedgerInfo], int]:
    """The ledgers with their first message index filled in, and the index of the next message.

    A ledger's first index is the recorded one, else the previous ledger's end (a ledger listed before the
    index existed, or by a rollover that did not record it); its end is the recovered end (its last entry's
    index + messages), else the next ledger's recorded first index, else one message per entry."""
    out: list[LedgerInfo] = []
    running = 0
    for i, info in enumerate(listed):
        first = info.first_index if info.first_index >= running else running
        end = ends.get(info.ledger_id)
        if end is None:
            following = listed[i + 1].first_index if i + 1 < len(listed) else -1
            end = following if following >= first + info.entries else first + info.entries
        out.append(replace(info, first_index=first))
        running = max(end, first + info.entries)
    return out, running


async def _recover_ledger(name: str, ctx: Context, last: LedgerInfo) -> tuple[LedgerInfo, int | None]:
    """The ledger recovered (fenced, its entry count fixed), and the index after its last message when its
    last entry carries one (one entry read)."""
    try:
        with trio.fail_after(ctx.settings.metadata_operation_timeout_s):
            handle = await ctx.bk.open_ledger(
                last.ledger_id, password=ctx.settings.password, recovery=True, use_stored_password=True
            )
    except NoSuchLedgerError:
        log.warning("managed ledger %s: ledger %d no longer exists; dropping it", name, last.ledger_id)
        return replace(last, entries=0, size_bytes=0), None
    end = None
    try:
        recovered = replace(
            last,
            entries=handle.last_add_confirmed + 1,
            size_bytes=handle.length,
            timestamp_ms=last.timestamp_ms or ctx.clock.time_ms(),
        )
        if recovered.entries > 0 and ctx.entry_indexing is not None:
            lac = handle.last_add_confirmed
            with trio.fail_after(ctx.settings.metadata_operation_timeout_s):
                (entry,) = await handle.read_entries(lac, lac)
            try:
                first, body = split(entry.payload)
                if first is not None:
                    end = first + ctx.entry_indexing.messages_in(body)
            except ValueError as exc:
                log.warning(
                    "managed ledger %s: ledger %d: last entry unreadable: %s", name, last.ledger_id, exc
                )
    finally:
        await handle.close()
    log.info(
        "managed ledger %s: recovered ledger %d with %d entries", name, last.ledger_id, recovered.entries
    )
    return recovered, end


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
        # counts from the cursor's positions are exact: read the few entries they need (coarse ledgers)
        positions = [snapshot.mark_delete]
        for ledger_id, first, last in snapshot.acked_ranges:
            positions += [Position(ledger_id, first - 1), Position(ledger_id, last)]
        await ml.learn_indexes_after(positions)


async def _delete_quietly(ctx: Context, ledger_id: int) -> None:
    try:
        await ctx.bk.delete_ledger(ledger_id)
    except (BKError, ManagedLedgerError) as exc:
        log.warning("deleting ledger %d failed: %s", ledger_id, exc)
