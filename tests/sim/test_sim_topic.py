"""The topic simulation (:mod:`sim.sim_topic`): many seeds, each a persistent topic of the broker core with
one durable subscription, published to and consumed through bookie crashes, metadata-session losses, clean
unloads and owner failovers, checked for "no acknowledged message lost", "mark-delete only moves forward"
and "an acknowledged message is not delivered again"; determinism of one seed; and proof that the checkers
catch re-injected defects.

``make test`` runs 2/5 of ``--sim-seeds`` (200 of the default 500); ``make sim-long`` 2,000. A failing seed
prints the command that reproduces it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sim.sim_managed_ledger import SHARDS, shard_seeds
from sim.sim_topic import TopicScenario, draw_topic_scenario, run_topic_seed
from sim.sim_world import report
from sim.test_sim_managed_ledger import _cursor_recovery_takes_the_first_position_entry

from magnetar.bookkeeper.client import BKError
from magnetar.broker.core.delivery import Delivery
from magnetar.broker.core.subscription import Subscription
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.errors import ManagedLedgerError

pytestmark = pytest.mark.usefixtures("quiet_magnetar")


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda shard: f"shard{shard}")
def test_topic_simulation_loses_no_acknowledged_message(sim_seeds: list[int], shard: int) -> None:
    failures = [result for result in map(run_topic_seed, shard_seeds(sim_seeds, shard)) if result.violations]
    assert not failures, report("test_topic_simulation_loses_no_acknowledged_message", failures)


def test_the_runs_fail_over_acknowledge_and_redeliver() -> None:
    """The seeds do what the tier claims: owners change, messages are acknowledged and all delivered,
    entries hold batches, and negative acks and ack timeouts redeliver."""
    results = [run_topic_seed(seed) for seed in range(20)]
    assert sum(r.owners > 1 for r in results) >= 5
    assert all(r.acknowledged > 0 for r in results)
    traces = "\n".join(line for r in results for line in r.trace)
    assert "unloads the topic" in traces
    assert "closed with mark-delete" in traces
    assert "consumer: nack" in traces
    assert "consumer: acked the range" in traces
    assert sum(", 1)" in line for line in traces.splitlines() if "stored at" in line) >= 20  # batch index 1


def test_a_seed_replays_the_same_trace() -> None:
    first, second = run_topic_seed(3), run_topic_seed(3)
    assert len(first.trace) > 100, "the run should do real work"
    assert first.trace == second.trace


# -- re-injected defects -------------------------------------------------------------------------------------


@contextmanager
def _redelivery_ignores_acknowledgements() -> Iterator[None]:
    """A negative ack or an ack timeout redelivers a message although another copy of it was acknowledged
    meanwhile (the defect this tier found): an acknowledged message is delivered again."""
    original = Subscription.acked

    def never(self: Subscription, delivery: Delivery) -> bool:
        return False

    Subscription.acked = never  # type: ignore[method-assign]
    try:
        yield
    finally:
        Subscription.acked = original  # type: ignore[method-assign]


@contextmanager
def _close_does_not_wait_for_a_flush() -> Iterator[None]:
    """A clean close that writes the final cursor state while a flush is still in flight (the defect this tier
    found): the flush's fallback can write its older state over the final one, and the next owner recovers
    a lower mark-delete."""
    original = ManagedCursor.close

    async def close(self: ManagedCursor, *, persist: bool) -> None:
        if self._closed:
            return
        self._closed = True
        store = self._store
        if store is not None and persist:
            with contextlib.suppress(BKError, ManagedLedgerError):
                await store.close(self.snapshot())

    ManagedCursor.close = close  # type: ignore[method-assign]
    try:
        yield
    finally:
        ManagedCursor.close = original  # type: ignore[method-assign]


def _unloads(scenario: TopicScenario) -> bool:
    """Scenarios with frequent clean unloads while bookies crash (a flush's add is then slow at times)."""
    return scenario.unload > 0 and scenario.crash_interval_s <= 2.0 and scenario.session_interval_s <= 1.2


def _any(scenario: TopicScenario) -> bool:
    return True


def _copies_meet(scenario: TopicScenario) -> bool:
    """Scenarios where a client holds a message past its ack timeout (a second copy comes), negatively
    acknowledges the second and acknowledges the first before the negative ack is due: the others cannot
    show the second defect, so they are not run."""
    timeout_s = scenario.ack_timeout_ms / 1000
    return (
        scenario.nack > 0
        and scenario.hold > 0
        and 0 < timeout_s < scenario.hold_s
        and scenario.hold_s - timeout_s < scenario.nack_delay_ms / 1000
    )


@pytest.mark.parametrize(
    ("defect", "seeds", "fits", "finding"),
    [
        (_cursor_recovery_takes_the_first_position_entry, 150, _any, "mark-delete moved back"),
        (_redelivery_ignores_acknowledgements, 150, _copies_meet, "again after accepting its ack"),
        (_close_does_not_wait_for_a_flush, 300, _unloads, "mark-delete moved back"),
    ],
    ids=["mark-delete-moves-back-on-reopen", "acked-message-redelivered", "close-races-a-flush"],
)
def test_checkers_catch_an_injected_topic_defect(
    defect: Callable[[], contextmanager[None]],
    seeds: int,
    fits: Callable[[TopicScenario], bool],
    finding: str,
) -> None:
    for seed in (seed for seed in range(seeds) if fits(draw_topic_scenario(seed))):
        violations = run_topic_seed(seed, defect).violations
        if any(finding in violation for violation in violations):
            return
    pytest.fail(f"{defect.__name__} went unnoticed for {seeds} seeds")
