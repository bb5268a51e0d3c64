"""Options of the deterministic simulations (see README.md here).

``--sim-seed=N`` runs exactly seed N (reproducing a failure); ``--sim-seeds=K`` runs seeds 0..K-1
(default 500 in CI; ``make sim-long`` runs 5000). The managed-ledger and topic tiers run 2/5 of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

DEFAULT_SEEDS = 500


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simulation")
    group.addoption("--sim-seed", type=int, default=None, help="run only this simulation seed")
    group.addoption("--sim-seeds", type=int, default=DEFAULT_SEEDS, help="how many simulation seeds to run")


@pytest.fixture
def sim_seeds(request: pytest.FixtureRequest) -> list[int]:
    seed = request.config.getoption("--sim-seed")
    if seed is not None:
        return [seed]
    return list(range(request.config.getoption("--sim-seeds")))


@pytest.fixture
def quiet_magnetar() -> Iterator[None]:
    """The managed ledger and the broker log every fault they ride out; thousands of lines per seed would
    cost more than the simulation. Errors still end up in the checkers' view: an unexpected exception
    crashes the run."""
    logger = logging.getLogger("magnetar")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
