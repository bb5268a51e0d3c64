"""``keep_alive_interval_seconds``: Pulsar's default (30 s), bounded, refusing hostile values, and reached by
its flat name from a standalone's environment (the fuzz storm's standalone sets it that way)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest

from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.broker.settings import BrokerSettings


def settings(**given: Any) -> BrokerSettings:
    return BrokerSettings.model_validate({"metadata_url": "memory://", **given})


def test_default_is_pulsars() -> None:
    assert settings().keep_alive_interval_seconds == 30


@pytest.mark.parametrize(
    "value", [0, -1, 3601, 2**63, "\uff13\uff10", "30\u202e", "3\x000", "thirty", 1.5, None]
)
def test_bounds_and_hostile_values(value: Any) -> None:
    with pytest.raises(pydantic.ValidationError, match="keep_alive_interval_seconds"):
        settings(keep_alive_interval_seconds=value)


def test_a_standalone_passes_it_to_its_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MAGNETAR_KEEP_ALIVE_INTERVAL_SECONDS", "3")
    standalone = StandaloneSettings.model_validate({"data_dir": tmp_path})
    assert standalone.broker.keep_alive_interval_seconds == 3
