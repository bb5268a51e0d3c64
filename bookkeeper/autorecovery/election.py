"""Electing the auditor among the AutoRecovery daemons (BookKeeper's ``AuditorElector``).

Every daemon votes with an ephemeral-sequential node ``<root>/underreplication/auditorelection/V_<seq>`` whose
value is ``{"bookieId": <daemon id>}``; the lowest sequence number is the auditor. A daemon that is not first
waits for a change of the votes; one that is first runs the auditor until its own vote disappears (its
metadata session was lost: the ephemeral vote went with it, and another daemon may already lead) - then it
stops auditing at once and votes again. Leaving (shutdown) deletes the vote so that the next daemon takes
over without waiting for the session to expire.

A read of the votes that fails (the metadata store is away) stops the auditor too - it must not act on the
store's state meanwhile - and the daemon waits for the store; it votes again only if its vote is gone. (A
second vote while the first survived the outage with the session would leave the daemon waiting behind its
own first vote, and the cluster with no auditor until the session ended.)
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

import trio

from magnetar.bookkeeper.autorecovery.metrics import AutoRecoveryStats
from magnetar.bookkeeper.autorecovery.signals import ChangeSignal
from magnetar.bookkeeper.metadata import (
    VOTE_PREFIX,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    auditor_election_path,
)

log = logging.getLogger(__name__)

ELECTION_POLL_S = 5.0
"""Votes are re-read at least this often (a missed notification costs this much, never a stuck election)."""
RETRY_S = 1.0


class AuditorElector:
    def __init__(self, store: MetadataStore, root: str, daemon_id: str, stats: AutoRecoveryStats) -> None:
        self._store = store
        self._path = auditor_election_path(root)
        self._id = daemon_id
        self._stats = stats
        self.vote: str | None = None

    @property
    def is_auditor(self) -> bool:
        return self._stats.auditor_elected

    async def run(
        self,
        lead: Callable[[], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Vote, lead while first (running ``lead()``), vote again after a lost session; until cancelled."""
        started = False
        with ChangeSignal(self._store, [self._path]) as signal:
            try:
                while True:
                    try:
                        if self.vote is None or self.vote not in await self._votes():
                            self.vote = await self._cast_vote()
                        if not started:
                            task_status.started()
                            started = True
                        await self._follow(lead, signal)
                    except MetadataStoreError as exc:
                        log.warning("auditor election: %s; voting again in %.0f s", exc, RETRY_S)
                        if not started:
                            task_status.started()
                            started = True
                        await trio.sleep(RETRY_S)
                        await self._store.health.wait_healthy(ELECTION_POLL_S)
            finally:
                self._stats.auditor_elected = False
                await self._withdraw()

    async def _cast_vote(self) -> str:
        value = json.dumps({"bookieId": self._id}).encode()
        stat = await self._store.put(
            f"{self._path}/{VOTE_PREFIX}", value, -1, ephemeral=True, sequential=True
        )
        log.info("auditor election: %s voted %s", self._id, stat.path.rsplit("/", 1)[1])
        return stat.path.rsplit("/", 1)[1]

    async def _votes(self) -> list[str]:
        return sorted(c for c in await self._store.get_children(self._path) if c.startswith(VOTE_PREFIX))

    async def _follow(self, lead: Callable[[], Awaitable[None]], signal: ChangeSignal) -> None:
        """Wait while another daemon leads; lead when first; return when our vote is gone."""
        while True:
            votes = await self._votes()
            if self.vote not in votes:
                log.warning("auditor election: the vote of %s is gone (session lost)", self._id)
                return
            if votes[0] == self.vote:
                await self._lead(lead, signal)
                return
            await signal.wait(ELECTION_POLL_S)

    async def _lead(self, lead: Callable[[], Awaitable[None]], signal: ChangeSignal) -> None:
        log.info("auditor election: %s is the auditor", self._id)
        self._stats.auditor_elected = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lead)
                try:
                    while self.vote in await self._votes():
                        await signal.wait(ELECTION_POLL_S)
                    log.warning("auditor election: %s lost its vote; it stops auditing", self._id)
                except MetadataStoreError as exc:
                    log.warning("auditor election: cannot read the votes (%s); the auditor pauses", exc)
                nursery.cancel_scope.cancel()
        finally:
            self._stats.auditor_elected = False

    async def _withdraw(self) -> None:
        vote, self.vote = self.vote, None
        if vote is None:
            return
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(5.0),
            contextlib.suppress(MetadataStoreError, NotFoundError),
        ):
            await self._store.delete(f"{self._path}/{vote}")
