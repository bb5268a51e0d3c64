"""The failure suite's options and fixtures.

``pytest tests/chaos`` runs the short version of every scenario (what CI runs, a few minutes in all);
``pytest tests/chaos --chaos-long`` (``make chaos-long``) runs them longer: more fault rounds, longer faults,
more traffic.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from chaos.harness import SUMMARIES


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos")
    group.addoption("--chaos-long", action="store_true", default=False, help="run the long failure scenarios")


@pytest.fixture
def long_run(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--chaos-long", default=False))


@pytest.fixture
def scale(long_run: bool) -> Callable[[float, float], float]:
    """``scale(short, long)``: the short figure in CI, the long one with ``--chaos-long``."""

    def pick(short: float, long: float) -> float:
        return long if long_run else short

    return pick


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARIES:
        terminalreporter.section("failure suite: scenario summaries")
        for table in SUMMARIES:
            terminalreporter.write_line(table)
            terminalreporter.write_line("")
