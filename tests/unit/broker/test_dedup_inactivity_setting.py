"""``broker_deduplication_producer_inactivity_timeout_minutes``: Pulsar's default (360), a fraction of a
minute allowed, hostile values refused, and reached by its flat name from a standalone's environment (the
purge test's standalone sets it that way)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest

from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.broker.settings import BrokerSettings

NAME = "broker_deduplication_producer_inactivity_timeout_minutes"


def settings(**given: Any) -> BrokerSettings:
    return BrokerSettings.model_validate({"metadata_url": "memory://", **given})


def test_default_is_pulsars_and_a_fraction_is_allowed() -> None:
    assert settings().broker_deduplication_producer_inactivity_timeout_minutes == 360
    assert settings(**{NAME: "0.05"}).broker_deduplication_producer_inactivity_timeout_minutes == 0.05


@pytest.mark.parametrize(
    "value",
    [0, -1, 2**63, "nan", "inf", float("nan"), "\uff13\uff10", "\u0663", "30\u202e", "3\x000", "six", None],
)
def test_bounds_and_hostile_values(value: Any) -> None:
    with pytest.raises(pydantic.ValidationError, match=NAME):
        settings(**{NAME: value})


def test_a_standalone_passes_it_to_its_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MAGNETAR_" + NAME.upper(), "0.05")
    standalone = StandaloneSettings.model_validate({"data_dir": tmp_path})
    assert standalone.broker.broker_deduplication_producer_inactivity_timeout_minutes == 0.05
