"""Change notifications for AutoRecovery's loops, and the cluster-wide replication switch.

:class:`ChangeSignal` turns the metadata store's notifications under some paths (and every session event:
changes made while disconnected are not replayed, so a reconnection means "look again") into a wake-up for
one task: ``await signal.wait(timeout_s)`` returns when something changed or the timeout passed, whichever
comes first - the timeout is the fallback that makes a missed notification cost a delay, never a hang.

:class:`ReplicationSwitch` follows ``/ledgers/underreplication/disable`` (BookKeeper's ``autorecovery
-disable``): workers and the auditor check :attr:`ReplicationSwitch.enabled` before every step - a copy in
progress stops at its next entry - and park in :meth:`ReplicationSwitch.wait_enabled` while it is off.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType

import trio

from magnetar.bookkeeper.autorecovery.underreplication import UnderreplicationManager
from magnetar.bookkeeper.metadata import (
    MetadataStore,
    MetadataStoreError,
    Notification,
    SessionEvent,
    disable_path,
)

log = logging.getLogger(__name__)

SWITCH_POLL_S = 5.0
"""How often the switch is re-read when no notification comes (a missed one is noticed this late)."""


class ChangeSignal:
    def __init__(self, store: MetadataStore, prefixes: Sequence[str]) -> None:
        self._prefixes = tuple(prefixes)
        self._event = trio.Event()
        self._unregister = [
            store.register_listener(self._on_change),
            store.register_session_listener(self._on_session),
        ]

    def _on_change(self, notification: Notification) -> None:
        if notification.path.startswith(self._prefixes):
            self._event.set()

    def _on_session(self, event: SessionEvent) -> None:
        self._event.set()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Until a change (True, the change is consumed) or ``timeout_s`` (False). A change that came while
        nobody waited counts at once, even when the timeout has already passed."""
        if not self._event.is_set():
            with trio.move_on_after(max(0.0, timeout_s)):
                await self._event.wait()
        if not self._event.is_set():
            return False
        self._event = trio.Event()
        return True

    def close(self) -> None:
        for unregister in self._unregister:
            unregister()
        self._unregister = []

    def __enter__(self) -> ChangeSignal:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ReplicationSwitch:
    def __init__(self, manager: UnderreplicationManager) -> None:
        self._manager = manager
        self.enabled = True
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with ChangeSignal(self._manager.store, [disable_path(self._manager.root)]) as signal:
            await self.refresh()
            task_status.started()
            while True:
                await signal.wait(SWITCH_POLL_S)
                await self.refresh()

    async def refresh(self) -> None:
        try:
            enabled = await self._manager.is_enabled()
        except MetadataStoreError as exc:
            log.warning("cannot read the replication switch (keeping %s): %s", self.enabled, exc)
            return
        if enabled != self.enabled:
            log.info("ledger replication %s", "enabled" if enabled else "disabled cluster-wide")
            self.enabled = enabled
            self._changed.set()
            self._changed = trio.Event()

    async def wait_enabled(self) -> None:
        while not self.enabled:
            await self._changed.wait()

    async def wait_changed(self) -> None:
        await self._changed.wait()
