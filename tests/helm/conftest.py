"""The chart loaded once per test module (Helm's Go library through helm-python-sdk)."""

from __future__ import annotations

from collections.abc import Iterator

import helm_python
import pytest
from fixtures.helm_chart import CHART_DIR


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded
