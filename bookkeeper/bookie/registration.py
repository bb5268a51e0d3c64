"""Bookie registration in the metadata store (BookKeeper's ``BookieStateManager``, ``RegistrationManager``).

Theory of operation. A serving bookie owns one *ephemeral* node named after its bookie id:
``/ledgers/available/<id>`` while writable, ``/ledgers/available/readonly/<id>`` while read-only
(:mod:`magnetar.bookkeeper.metadata.bookies`). The node is created with "must not exist": if a node of the
same id is already there it belongs to an earlier session of this bookie (a restart faster than the session
timeout) or to another process using the same id - we wait up to ``registration_timeout_ms`` for it to
expire, as BookKeeper's ``checkRegNodeAndWaitExpired``, and then give up loudly. A mode switch creates the
new node first and deletes the old one (a reader may briefly see both; ``list_bookies`` then counts the
bookie as read-only). After the metadata session is lost its ephemeral nodes are gone: on
``SESSION_REESTABLISHED`` the bookie registers again. On shutdown it deletes its node (the session's end
would too, later).

A metadata outage changes nothing else: reads and writes need no metadata, so the bookie serves on. A mode
switch that falls in an outage waits for the store (``store.health``) instead of retrying blindly, and is
registered as soon as the store is back.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import trio

from magnetar.bookkeeper.bookie.disk_monitor import ReadOnlyState
from magnetar.bookkeeper.metadata import (
    BadVersionError,
    BookieServiceInfo,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    SessionEvent,
    readonly_path,
    writable_path,
)

log = logging.getLogger(__name__)

UNREGISTER_TIMEOUT_S = 5.0


class RegistrationError(Exception):
    """The bookie could not register (its id is held by another live session, or the store failed)."""


class BookieRegistration:
    def __init__(
        self,
        store: MetadataStore,
        info: Callable[[bool], BookieServiceInfo],
        state: ReadOnlyState,
        *,
        timeout_ms: int,
        retry_ms: int,
    ) -> None:
        self._store = store
        self._info = info
        self._state = state
        self._timeout_s = timeout_ms / 1000
        self._retry_s = retry_ms / 1000
        self._registered: str | None = None  # path of our live node
        self._wakeup = trio.Event()
        self.registrations = 0  # successful node creations, for tests and logs

    @property
    def registered_path(self) -> str | None:
        return self._registered

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register now (raising :class:`RegistrationError` on failure), then follow mode and session."""
        unlisten_session = self._store.register_session_listener(self._on_session)
        unlisten_mode = self._state.add_listener(lambda _readonly: self._wakeup.set())
        try:
            await self._converge()
            task_status.started()
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                try:
                    await self._converge()
                except (RegistrationError, MetadataStoreError) as exc:
                    await self._pause_after(exc)
                    self._wakeup.set()
        finally:
            unlisten_session()
            unlisten_mode()

    async def _pause_after(self, failure: Exception) -> None:
        health = self._store.health
        if health.healthy:
            log.error("re-registration failed, retrying in %.1fs: %s", self._retry_s, failure)
            await trio.sleep(self._retry_s)
            return
        log.warning("registration waits for the metadata store (%s): %s", health.state.value, failure)
        while not await health.wait_healthy(self._retry_s):
            pass

    async def unregister(self) -> None:
        """Delete our node (shielded, bounded): the bookie leaves the available lists at once."""
        path, self._registered = self._registered, None
        if path is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(UNREGISTER_TIMEOUT_S):
            try:
                await self._store.delete(path)
                log.info("unregistered %s", path)
            except NotFoundError:
                pass
            except MetadataStoreError as exc:
                log.warning("could not delete registration %s (the session end will): %s", path, exc)

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            log.warning("metadata session lost: registration %s is gone", self._registered)
            self._registered = None
        elif event is SessionEvent.SESSION_REESTABLISHED:
            self._wakeup.set()

    async def _converge(self) -> None:
        readonly = self._state.readonly
        info = self._info(readonly)
        target = readonly_path(info.bookie_id) if readonly else writable_path(info.bookie_id)
        if self._registered == target:
            return
        await self._create(target, info.to_json())
        previous, self._registered = self._registered, target
        self.registrations += 1
        log.info("registered bookie %s at %s", info.bookie_id, target)
        if previous is not None:
            with contextlib.suppress(NotFoundError):
                await self._store.delete(previous)

    async def _create(self, path: str, value: bytes) -> None:
        deadline = trio.current_time() + self._timeout_s
        while True:
            try:
                await self._store.put(path, value, -1, ephemeral=True)
                return
            except BadVersionError:
                if trio.current_time() >= deadline:
                    raise RegistrationError(
                        f"{path} is held by another session for more than "
                        f"registration_timeout_ms={int(self._timeout_s * 1000)}: is this bookie id in use?"
                    ) from None
                log.warning("%s exists (a previous session?); waiting for it to expire", path)
                await trio.sleep(self._retry_s)
