"""Switching a managed ledger's current ledger: rollover, deferred rollover, replacing a failed ledger.

Theory of operation (docs/upstream.md, Pulsar §3; the rule of *when* a ledger is full is :mod:`.rollover`):

* **Rollover.** Once ``max_entries_per_ledger`` adds were *pushed* to the current ledger (or it is due by size
  or age, checked on acks and by the periodic idle check), the next ledger is created and the ledger list
  CAS-written to name it, while the current ledger is still written; adds past the entry cap queue meanwhile.
  In that list the current ledger is listed as *open* (no entry count: see :mod:`.ledger_metadata`), so
  whoever opens the managed ledger recovers it as well as the next one: an entry added to the current ledger
  is found whether the write happened or not. Then the switch: adds queue, the in-flight ones are
  acknowledged, the current ledger is closed (a failure to close it is harmless: it is listed as open, and a
  reader recovers it), the queued adds go to the next ledger in order, and a last list write records the
  closed ledger's entry count. Nothing is lost or reordered across a rollover.
* **Deferred rollover** (the metadata store is unavailable). Creating a ledger and writing the list need
  the metadata store; appending to an open ledger does not. So when the next ledger cannot be created or
  listed (the store reports itself unhealthy, a call failed, or creating takes longer than
  ``rollover_create_wait_ms``), the rollover is *deferred*: the current ledger goes on taking entries past its
  cap, up to ``rollover_deferred_entries_max`` more, and beyond that adds fail at once with
  :class:`~.errors.RolloverDeferredError` (the producer's error result; nothing was written). It is retried
  every ``rollover_retry_interval_ms`` once the store is healthy again, with a random share of that interval
  first so that the topics of a broker do not all roll at once. A list write whose outcome is unknown (the
  connection dropped while it was in flight) is settled before the next one (:mod:`.list_writer`); adds go on
  to the current ledger meanwhile, since both possible lists cover it. Safety does not depend on the store: a
  broker that took the topic over recovered (fenced) the current ledger, so the adds of this one fail with a
  fenced error instead of being acknowledged.
* **Replacing a failed ledger.** After a failed add (``WRITE_FAILED``) there is no ledger to keep writing to:
  the in-flight adds are drained, the ledger closed (dropped from the list if it holds no entry), a new one
  created and listed (``CREATING_LEDGER``), and the queued adds go to it. If no ledger can be opened, the
  queued adds fail and the managed ledger stays ``WRITE_FAILED``; the next add tries again.

One switch runs at a time, in the ledger's nursery. Every state change goes through the ledger's checked
transitions (:mod:`.ledger_state`); a fence, close or termination met between two awaits ends the switch.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.client import BKError, LedgerFencedError, LedgerHandle
from magnetar.managed_ledger.context import create_bk_ledger
from magnetar.managed_ledger.errors import (
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerWriteError,
    MetadataUnavailableError,
)
from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.ledger_state import STOPPED, State
from magnetar.managed_ledger.rollover import jittered_max_time_ms, ledger_is_full

if TYPE_CHECKING:
    from magnetar.managed_ledger.context import Context
    from magnetar.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)


class LedgerSwitcher:
    """When and how one managed ledger moves on to a new current ledger."""

    def __init__(self, ml: ManagedLedger, ctx: Context) -> None:
        self._ml = ml
        self._ctx = ctx
        self._settings = ctx.settings
        self._limits = ctx.settings.rollover_limits()
        """Built once (the settings are frozen): every add checks them."""
        self.ledger_created_ms = ctx.clock.time_ms()
        self._max_age_ms = self._jittered_max_age()
        self.rolling = False
        self._done = trio.Event()
        self._done.set()
        self.next: LedgerHandle | None = None
        """The next ledger while a rollover lists it and the current ledger is still written."""
        self.deferred_since_ms: int | None = None
        """Set while the rollover is deferred: the current ledger takes entries past its cap."""
        self.rollovers_deferred_total = 0
        self.ledger_switches_counter = 0
        """New ledgers started since this instance opened (rollovers, and recoveries from a failed add)."""

    async def wait_done(self) -> None:
        """Return once no switch is under way."""
        await self._done.wait()

    def _current_is_full(self) -> bool:
        current = self._ml.current
        if current is None:
            return False
        info = self._ml.ledgers.get(current.ledger_id)
        if info is None:
            return False
        age_ms = self._ctx.clock.time_ms() - self.ledger_created_ms
        return ledger_is_full(self._limits, info.entries, info.size_bytes, age_ms, self._max_age_ms)

    def check_rollover(self) -> None:
        """Roll a non-empty ledger that is due (by entries, size or age)."""
        if self._ml.state is State.LEDGER_OPENED and not self.rolling and self._current_is_full():
            self.start_rollover()

    def start_rollover(self) -> None:
        if self.rolling or self._ml.state is not State.LEDGER_OPENED:
            return
        self.start_new_ledger()

    def start_new_ledger(self) -> None:
        if self.rolling:
            return
        self.rolling = True
        self._done = trio.Event()
        self._ml.spawn(self._rollover, "rollover")

    async def _rollover(self) -> None:
        ml = self._ml
        failure: ManagedLedgerWriteError | None = None
        try:
            if ml.state is State.LEDGER_OPENED and ml.current is not None:
                await self._roll_current()
            else:
                await self._replace_failed_ledger()
        except ManagedLedgerFencedError:
            pass
        except (BKError, ManagedLedgerError, trio.TooSlowError) as exc:
            log.error("managed ledger %s: could not open a new ledger: %s", ml.name, exc)
            if ml.state not in (State.FENCED, State.CLOSED, State.TERMINATED):
                ml._move(State.WRITE_FAILED, "no new ledger could be opened")
            failure = ManagedLedgerWriteError(f"no ledger available: {exc}")
        finally:
            self.rolling = False
            self._done.set()
        if failure is not None:
            # Only now, with the rollover over: an add that a callback makes starts the next attempt
            # (queued while ``rolling`` was still set, it would wait for an attempt nothing starts).
            ml.adds.fail_pending(failure)
        if ml.state is State.LEDGER_OPENED:
            ml.adds.flush_pending()
            self._ctx.on_trim_candidate(ml)

    async def _roll_current(self) -> None:
        """Create and list the next ledger while the current one is written, then switch (see above)."""
        ml = self._ml
        handle = await self._create_next()
        if handle is None:
            return
        if self._stopped_writing():
            await ml.trimmer.delete_bk_ledger(handle.ledger_id)
            return
        self.next = handle
        # From here on the next ledger may be in the stored list: it is never deleted by this instance.
        if not await self._list_next() or self._stopped_writing():
            return
        ml._move(State.CLOSING_LEDGER, f"rollover to ledger {handle.ledger_id}")
        await ml.adds.drain_inflight()
        closed = await self.close_current()
        if self._stopped_writing():
            return
        self.next = None
        ml.ledgers.append(LedgerInfo(handle.ledger_id))
        self._start_writing(handle, closed)
        ml.spawn(self._record_closed_ledger, "ledger list")

    async def _list_next(self) -> bool:
        """Write the list naming the next ledger; False if this instance stopped writing meanwhile. While it
        cannot be written (or its outcome is unknown) the rollover is deferred and the write retried."""
        metadata = self._ml.metadata
        async with metadata.lock:
            while True:
                try:
                    await metadata.write(list(self._ml.ledgers))
                    return True
                except (MetadataUnavailableError, trio.TooSlowError) as exc:
                    self._defer_rollover(f"writing the ledger list failed: {exc}")
                await self._pause_before_retry()
                if self._stopped_writing():
                    return False

    async def _record_closed_ledger(self) -> None:
        """Best effort: the list with the closed ledger's entry count (the next list write records it too)."""
        metadata = self._ml.metadata
        async with metadata.lock:
            if self._stopped_writing() or self.next is not None:
                return
            with contextlib.suppress(ManagedLedgerError, trio.TooSlowError):
                await metadata.write(list(self._ml.ledgers))

    async def _replace_failed_ledger(self) -> None:
        """After a failed add: no current ledger to keep writing to, so close it, then create and switch."""
        ml = self._ml
        await ml.adds.drain_inflight()
        closed = await self.close_current()
        if self._stopped_writing():
            return
        ml._move(State.CREATING_LEDGER, "replacing a failed ledger")
        handle = await self.create_ledger()
        # A ledger closed with no entries (a failed one) is dropped from the list, as at open.
        dropped = closed.ledger_id if closed is not None and closed.entries == 0 else None
        try:
            async with ml.metadata.lock:
                infos = [i for i in ml.ledgers if i.ledger_id != dropped]
                infos.append(LedgerInfo(handle.ledger_id))
                await ml.metadata.write_settled(infos)
                if dropped is not None:
                    ml.ledgers.remove(dropped)
                    ml.message_index.remove_ledger(dropped)
                ml.ledgers.append(LedgerInfo(handle.ledger_id))
        except ManagedLedgerFencedError:
            with trio.CancelScope(shield=True):
                await ml.trimmer.delete_bk_ledger(handle.ledger_id)
            raise
        if dropped is not None:
            await ml.trimmer.delete_bk_ledger(dropped)
        self._start_writing(handle, closed)

    async def _create_next(self) -> LedgerHandle | None:
        """Create the next ledger while the current one stays open; None if this instance stopped writing.

        While it cannot be created the rollover is deferred (see the module's docstring) and retried."""
        while True:
            health = self._ctx.health
            if health is not None and not health.healthy and self._ml.state is State.LEDGER_OPENED:
                self._defer_rollover("the metadata store is unavailable")
            else:
                try:
                    return await self._create_or_defer_when_slow()
                except (BKError, ManagedLedgerError, trio.TooSlowError) as exc:
                    if self._ml.state is not State.LEDGER_OPENED:
                        raise
                    self._defer_rollover(f"creating the next ledger failed: {exc}")
            await self._pause_before_retry()
            if self._stopped_writing():
                return None

    def _stopped_writing(self) -> bool:
        """Fenced, closed or terminated (awaits in between may have changed the state)."""
        return self._ml.state in STOPPED

    async def _create_or_defer_when_slow(self) -> LedgerHandle:
        timer = trio.CancelScope()

        async def defer_when_slow() -> None:
            with timer:
                await trio.sleep(self._settings.rollover_create_wait_ms / 1000)
                if self.rolling and self._ml.state is State.LEDGER_OPENED:
                    self._defer_rollover(
                        "creating the next ledger takes longer than rollover_create_wait_ms="
                        f"{self._settings.rollover_create_wait_ms}"
                    )

        self._ml.spawn(defer_when_slow, "rollover timer")
        try:
            return await self.create_ledger()
        finally:
            timer.cancel()

    async def _pause_before_retry(self) -> None:
        interval_s = self._settings.rollover_retry_interval_ms / 1000
        health = self._ctx.health
        if health is not None and not health.healthy:
            while not await health.wait_healthy(interval_s):
                if self._stopped_writing():
                    return
        # a random share of the interval: the topics of a broker do not all roll at the same instant
        await trio.sleep(interval_s * (0.1 + 0.9 * self._ctx.rng.random()))

    def _defer_rollover(self, why: str) -> None:
        ml = self._ml
        if self.deferred_since_ms is not None or ml.state is not State.LEDGER_OPENED:
            return
        self.deferred_since_ms = self._ctx.clock.time_ms()
        self.rollovers_deferred_total += 1
        log.info(
            "managed ledger %s: rollover deferred (%s); ledger %d goes on past its cap of %d entries, up to "
            "%d more",
            ml.name,
            why,
            ml.current_ledger_id,
            self._settings.max_entries_per_ledger,
            self._settings.rollover_deferred_entries_max,
        )
        ml.adds.flush_pending()
        if ml.adds.has_pending:  # beyond the bound too: the producers hear it now instead of waiting
            ml.adds.fail_pending(ml.adds.deferred_cap_error())

    async def close_current(self) -> LedgerInfo | None:
        """Close the current ledger and record its entry count, size and close time; None if there is none."""
        ml = self._ml
        handle = ml.current
        if handle is None:
            return None
        try:
            await handle.close()
        except LedgerFencedError:
            ml.fence(f"ledger {handle.ledger_id} was fenced while closing")
            raise ManagedLedgerFencedError(ml.name) from None
        except BKError as exc:
            # The entries up to LAC are ours; a later recovery will fix the ledger's metadata.
            log.warning("managed ledger %s: closing ledger %d failed: %s", ml.name, handle.ledger_id, exc)
        info = ml.ledgers.get(handle.ledger_id)
        assert info is not None
        closed = replace(
            info,
            entries=handle.last_add_confirmed + 1,
            size_bytes=handle.length,
            timestamp_ms=self._ctx.clock.time_ms(),
        )
        ml.ledgers.update(closed)
        ml.current = None
        return closed

    async def close_unswitched(self) -> None:
        """Close a next ledger that a rollover listed but never switched to (an empty ledger)."""
        next_ledger, self.next = self.next, None
        if next_ledger is not None:
            with contextlib.suppress(BKError):
                await next_ledger.close()

    def _start_writing(self, handle: LedgerHandle, closed: LedgerInfo | None) -> None:
        """``handle`` (in the list now) becomes the current ledger."""
        ml = self._ml
        if self.deferred_since_ms is not None and closed is not None:
            log.info(
                "managed ledger %s: rolled over after %.1f s deferred: ledger %d closed with %d entries "
                "(cap %d)",
                ml.name,
                (self._ctx.clock.time_ms() - self.deferred_since_ms) / 1000,
                closed.ledger_id,
                closed.entries,
                self._settings.max_entries_per_ledger,
            )
        self.deferred_since_ms = None
        ml.current = handle
        ml.message_index.open_ledger(handle.ledger_id)
        ml.adds.pushed = 0
        self.ledger_created_ms = self._ctx.clock.time_ms()
        self._max_age_ms = self._jittered_max_age()
        ml._move(State.LEDGER_OPENED, f"ledger {handle.ledger_id} is current")
        self.ledger_switches_counter += 1
        log.info("managed ledger %s: now writing to ledger %d", ml.name, handle.ledger_id)

    async def create_ledger(self) -> LedgerHandle:
        return await create_bk_ledger(self._ctx, self._ml.name, self._ml.quorum)

    def _jittered_max_age(self) -> int:
        return jittered_max_time_ms(
            self._limits, self._ctx.rng.random(), self._settings.rollover_jitter_fraction
        )
