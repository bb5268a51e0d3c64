"""Which bundles this broker serves through metadata outages: the ownership state machine, sans-IO.

A broker owns a bundle while its ephemeral node exists (see :mod:`.manager`). The node lives as long as the
broker's metadata session; this machine decides what the broker does when the session is in doubt. It is fed
the store's session events, the outcomes of the I/O it asks for, and the time; it answers with actions
(:class:`GiveUp`, :class:`Claim`, :class:`Register`) that :class:`~.manager.OwnershipManager` carries out.

States of a bundle: *confirmed* (our node exists in our current session) or *unconfirmed* (our session
expired, and the node with it; we serve on and create the node again as soon as the store answers).

* ``CONNECTION_LOST``: nothing changes - the session may well survive. The outage clock starts.
* ``RECONNECTED``: the same session, so the nodes are still ours. The outage ends (unless some bundle is still
  unconfirmed from an earlier session loss: those are claimed again).
* ``SESSION_LOST``: every bundle turns unconfirmed; the broker keeps serving them.
* ``SESSION_REESTABLISHED``: register the broker again and claim every unconfirmed bundle: create its node
  anew. Created - confirmed again. Held by another broker (it reached the store while we could not, and took
  the bundle) - give the bundle up: its topics are closed here and their clients look them up again. Any
  other outcome (the store failed) - claim again after ``claim_retry_interval_s``.
* Time: a broker that has gone ``serve_without_session_max_s`` since it lost its connection without getting
  every bundle confirmed again gives up every bundle it still serves (``0``: give them up the moment the
  session is lost, as brokers did before).

Why serving on is safe. Keeping a bundle never rested on the session: a broker that takes a topic over opens
its managed ledger, which *recovers* the current ledger - the bookies fence it - and CAS-writes the ledger
list. From then on every add of the old owner fails with a fenced error and every metadata write of it with a
version conflict, so nothing it writes afterwards is acknowledged; what it acknowledged before is in the
recovered ledger (recovery keeps every entry an ack quorum stored). The old owner learns it was replaced at
its first write (the topic is fenced and closed, clients look the topic up again), or when its claim finds
the node held by another broker, or when ``serve_without_session_max_s`` runs out - whichever comes first.
The bound exists for liveness, not safety: a broker cut off alone whose topics see no writes would otherwise
keep consumers that the new owner never reaches.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from magnetar.bookkeeper.metadata import SessionEvent

Bundle = tuple[str, str]


class BundleStatus(enum.Enum):
    CONFIRMED = "confirmed"
    UNCONFIRMED = "unconfirmed"


class ClaimOutcome(enum.Enum):
    CREATED = "created"
    """The bundle's node is ours (again) in the current session."""
    HELD_BY_ANOTHER = "held-by-another"
    """Another broker acquired the bundle meanwhile."""
    FAILED = "failed"
    """The store failed or the node is in flux: try again later."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop serving these bundles now (fence their topics; clients look them up again)."""

    bundles: frozenset[Bundle]
    reason: str


@dataclass(frozen=True, slots=True)
class Claim:
    """Create the nodes of these bundles again (report each outcome with :meth:`OwnershipState.on_claim`)."""

    bundles: frozenset[Bundle]


@dataclass(frozen=True, slots=True)
class Register:
    """Register the broker again (its node died with the previous session)."""


Action = GiveUp | Claim | Register


class OwnershipState:
    def __init__(self, *, serve_without_session_max_s: float, claim_retry_interval_s: float) -> None:
        if serve_without_session_max_s < 0 or claim_retry_interval_s <= 0:
            raise ValueError("serve_without_session_max_s >= 0 and claim_retry_interval_s > 0 are needed")
        self.serve_without_session_max_s = serve_without_session_max_s
        self.claim_retry_interval_s = claim_retry_interval_s
        self.bundles: dict[Bundle, BundleStatus] = {}
        self.connected = True
        self.session_epoch = 0
        """Sessions lost so far: an acquisition that spans a loss may have created its node in the old one."""
        self.outage_since: float | None = None
        """When the connection was lost, until it is back and every bundle confirmed again."""
        self._claim_at: float | None = None

    # -- questions -------------------------------------------------------------------------------

    def serves(self, bundle: Bundle) -> bool:
        return bundle in self.bundles

    @property
    def unconfirmed(self) -> frozenset[Bundle]:
        return frozenset(b for b, status in self.bundles.items() if status is BundleStatus.UNCONFIRMED)

    def deadline(self) -> float | None:
        """The next time :meth:`on_tick` has something to do (None: only events matter)."""
        times = []
        if self._claim_at is not None:
            times.append(self._claim_at)
        if self.outage_since is not None and self.bundles and self.serve_without_session_max_s > 0:
            times.append(self.outage_since + self.serve_without_session_max_s)
        return min(times, default=None)

    # -- what this broker did --------------------------------------------------------------------

    def acquired(self, bundle: Bundle, epoch: int, now: float) -> list[Action]:
        """Our create of ``bundle``'s node succeeded; ``epoch`` is :attr:`session_epoch` from before it."""
        if epoch == self.session_epoch:
            self.bundles[bundle] = BundleStatus.CONFIRMED
            return []
        # the node may have been created in the session that was lost meanwhile: make sure of it
        self.bundles[bundle] = BundleStatus.UNCONFIRMED
        self._start_outage(now)
        return [Claim(frozenset({bundle}))] if self.connected else []

    def released(self, bundle: Bundle) -> None:
        self.bundles.pop(bundle, None)
        self._end_outage_if_over()

    # -- inputs ----------------------------------------------------------------------------------

    def on_session_event(self, event: SessionEvent, now: float) -> list[Action]:
        if event is SessionEvent.CONNECTION_LOST:
            self.connected = False
            self._start_outage(now)
            return []
        if event is SessionEvent.SESSION_LOST:
            self.connected = False
            self.session_epoch += 1
            self._start_outage(now)
            for bundle in self.bundles:
                self.bundles[bundle] = BundleStatus.UNCONFIRMED
            if self.serve_without_session_max_s == 0:
                return self._give_up_all("the metadata session was lost")
            return []
        self.connected = True
        actions: list[Action] = [Register()] if event is SessionEvent.SESSION_REESTABLISHED else []
        if self.unconfirmed:
            self._claim_at = None
            actions.append(Claim(self.unconfirmed))
        self._end_outage_if_over()
        return actions

    def on_claim(self, bundle: Bundle, outcome: ClaimOutcome, now: float, detail: str = "") -> list[Action]:
        if self.bundles.get(bundle) is not BundleStatus.UNCONFIRMED:
            return []  # given up or released meanwhile
        if outcome is ClaimOutcome.CREATED:
            self.bundles[bundle] = BundleStatus.CONFIRMED
            self._end_outage_if_over()
            return []
        if outcome is ClaimOutcome.HELD_BY_ANOTHER:
            del self.bundles[bundle]
            self._end_outage_if_over()
            why = "another broker acquired it while this one had no metadata session"
            return [GiveUp(frozenset({bundle}), f"{why}{f' ({detail})' if detail else ''}")]
        if self._claim_at is None:
            self._claim_at = now + self.claim_retry_interval_s
        return []

    def on_tick(self, now: float) -> list[Action]:
        if (
            self.outage_since is not None
            and self.bundles
            and self.serve_without_session_max_s > 0
            and now >= self.outage_since + self.serve_without_session_max_s
        ):
            return self._give_up_all(
                f"no confirmed metadata session for serve_without_session_max_s="
                f"{self.serve_without_session_max_s:g} s"
            )
        if self._claim_at is not None and now >= self._claim_at:
            self._claim_at = None
            if self.connected and self.unconfirmed:
                return [Claim(self.unconfirmed)]
        return []

    # -- internals -------------------------------------------------------------------------------

    def _start_outage(self, now: float) -> None:
        if self.outage_since is None:
            self.outage_since = now

    def _end_outage_if_over(self) -> None:
        if self.connected and not self.unconfirmed:
            self.outage_since = None
            self._claim_at = None

    def _give_up_all(self, reason: str) -> list[Action]:
        bundles = frozenset(self.bundles)
        self.bundles.clear()
        self._claim_at = None
        if self.connected:
            self.outage_since = None
        return [GiveUp(bundles, reason)] if bundles else []
