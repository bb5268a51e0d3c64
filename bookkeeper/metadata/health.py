"""Whether the metadata store can be used now: the signal every service that acts on metadata checks.

Theory of operation. A store's session events (:class:`~.api.SessionEvent`) drive three states::

    CONNECTED    --CONNECTION_LOST-------> DISCONNECTED
    DISCONNECTED --RECONNECTED-----------> CONNECTED       (the same session: ephemeral nodes kept)
    DISCONNECTED --SESSION_LOST----------> SESSION_LOST    (expired: ephemeral nodes gone)
    SESSION_LOST --SESSION_REESTABLISHED-> CONNECTED       (a new session)

Only ``CONNECTED`` is *healthy*. An *outage* is the time from leaving ``CONNECTED`` to coming back to it; it
"lost the session" when a ``SESSION_LOST`` fell in it (the store's ephemeral nodes are gone, and another
client may have taken what they held). ``generation`` counts outages: a reader that notes it before a series
of reads and finds the store healthy with the same generation afterwards had an uninterrupted view. During an
outage a read can fail, and a view assembled across one may be stale or partial; a service that would *act*
on such a view (delete a ledger whose metadata it did not find, re-replicate a ledger it believes
under-replicated) pauses instead: it skips its pass while the store is unhealthy and discards a pass whose
generation changed.

Every backend owns one (``store.health``) and feeds it before its other session listeners run, so a listener
sees the new state. Waiting is bounded: :meth:`MetadataHealth.wait_healthy` takes a timeout; callers that
queue requests while waiting bound their queue themselves.

Users: the broker (keeps serving through outages, waits bounded for the store where it must, logs once per
outage what it defers), the managed ledger (defers rollovers), the bookie's garbage collector (pauses), and
any service that must not act on a stale view of the metadata (AutoRecovery).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.metadata.api import SessionEvent, Unregister
from magnetar.bookkeeper.metadata.listeners import ListenerSet


class HealthState(enum.Enum):
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    SESSION_LOST = "session-lost"


@dataclass(frozen=True, slots=True)
class HealthChange:
    """A transition between healthy and unhealthy, as listeners see it."""

    healthy: bool
    state: HealthState
    generation: int
    outage_s: float
    """When ``healthy``: how long the outage that just ended lasted; else 0."""
    session_lost: bool
    """Whether the session was lost in this outage (so far)."""


class MetadataHealth:
    """The health of one store's connection and session; fed with :meth:`on_session_event`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.state = HealthState.CONNECTED
        self.generation = 0
        """Outages so far (increases as each begins)."""
        self.sessions_lost_total = 0
        self.outage_started_s: float | None = None
        self.session_lost_in_outage = False
        self._listeners: ListenerSet[HealthChange] = ListenerSet()
        self._healthy = trio.Event()
        self._healthy.set()

    @property
    def healthy(self) -> bool:
        return self.state is HealthState.CONNECTED

    @property
    def outages_total(self) -> int:
        return self.generation

    def outage_s(self) -> float:
        """How long the current outage has lasted (0 while healthy)."""
        if self.outage_started_s is None:
            return 0.0
        return max(0.0, self._clock() - self.outage_started_s)

    def uninterrupted_since(self, generation: int) -> bool:
        """Healthy now, and no outage began since ``generation`` was read."""
        return self.healthy and self.generation == generation

    def add_listener(self, listener: Callable[[HealthChange], None]) -> Unregister:
        """``listener`` runs (synchronously, on the trio thread) whenever the store turns healthy or not."""
        return self._listeners.add(listener)

    async def wait_healthy(self, timeout_s: float) -> bool:
        """Wait until the store is healthy, at most ``timeout_s``; whether it is."""
        if self.healthy:
            return True
        with trio.move_on_after(timeout_s):
            while not self.healthy:
                await self._healthy.wait()
        return self.healthy

    # -- the state machine --------------------------------------------------------------------------

    def on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.CONNECTION_LOST:
            self._enter(HealthState.DISCONNECTED)
        elif event is SessionEvent.SESSION_LOST:
            self.sessions_lost_total += 1
            self._enter(HealthState.SESSION_LOST)
            self.session_lost_in_outage = True
        elif event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._enter(HealthState.CONNECTED)

    def _enter(self, state: HealthState) -> None:
        was_healthy = self.healthy
        if state is self.state:
            return
        self.state = state
        if was_healthy and not self.healthy:
            self.generation += 1
            self.outage_started_s = self._clock()
            self.session_lost_in_outage = state is HealthState.SESSION_LOST
            self._healthy = trio.Event()
            self._notify(outage_s=0.0)
        elif not was_healthy and self.healthy:
            lasted = self.outage_s()
            self.outage_started_s = None
            self._healthy.set()
            self._notify(outage_s=lasted)
            self.session_lost_in_outage = False

    def _notify(self, *, outage_s: float) -> None:
        self._listeners.emit(
            HealthChange(self.healthy, self.state, self.generation, outage_s, self.session_lost_in_outage)
        )
