"""Each setting declared once: AutoRecovery's client takes the client's request timeouts and rack rule, with
AutoRecovery's own defaults for the timeouts (10,000 ms against a broker's 5,000) wherever the settings come
from; the shared declaration bounds them for every process; and every name still declared in two models has
its reason in the census (``tests/bench/settings_census.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench.settings_census import REPEATS_KEPT, declarations
from pydantic import BaseModel, ValidationError

from magnetar.admin.processes.autorecovery_wiring import AutoRecoveryProcessSettings, BookieProcessSettings
from magnetar.admin.processes.config import load_settings
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.client.settings import ClientSettings
from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings
from magnetar.broker.settings import BrokerSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MAGNETAR_"):
            monkeypatch.delenv(name)


def test_autorecovery_keeps_its_timeouts_and_hands_them_to_its_client() -> None:
    settings = AutoRecoverySettings()
    assert (settings.add_timeout_ms, settings.read_timeout_ms) == (10_000, 10_000)
    client = settings.client_settings()
    assert (client.add_timeout_ms, client.read_timeout_ms) == (10_000, 10_000)
    assert ClientSettings().add_timeout_ms == BrokerSettings().client.add_timeout_ms == 5_000
    one = AutoRecoverySettings(add_timeout_ms=7_000, min_num_racks_per_write_quorum=3)
    assert (one.add_timeout_ms, one.read_timeout_ms) == (7_000, 10_000)  # the other keeps its default
    assert one.client_settings().min_num_racks_per_write_quorum == 3


def test_the_timeouts_reach_autorecovery_from_every_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MAGNETAR_AUTORECOVERY__READ_TIMEOUT_MS", "4000")
    bookie = load_settings(BookieProcessSettings, {}).settings
    assert (bookie.autorecovery.add_timeout_ms, bookie.autorecovery.read_timeout_ms) == (10_000, 4_000)
    monkeypatch.delenv("MAGNETAR_AUTORECOVERY__READ_TIMEOUT_MS")
    config = tmp_path / "autorecovery.toml"
    config.write_text("[autorecovery]\nadd_timeout_ms = 2500\n")
    alone = load_settings(AutoRecoveryProcessSettings, {}, config).settings
    assert (alone.autorecovery.add_timeout_ms, alone.autorecovery.read_timeout_ms) == (2_500, 10_000)


@pytest.mark.parametrize("model", [AutoRecoverySettings, ClientSettings, TcpTransportSettings])
@pytest.mark.parametrize("name", ["add_timeout_ms", "read_timeout_ms"])
def test_a_request_timeout_is_bounded_in_every_model_by_its_name(model: type[BaseModel], name: str) -> None:
    with pytest.raises(ValidationError, match=name):
        model.model_validate({name: 600_001})
    with pytest.raises(ValidationError, match=name):
        model.model_validate({name: 0})
    assert getattr(model.model_validate({name: 600_000}), name) == 600_000


def test_every_name_declared_twice_has_its_reason_in_the_census() -> None:
    repeated = {name for name, places in declarations().items() if len(places) > 1}
    assert repeated - set(REPEATS_KEPT) == set(), "a repeated declaration without a reason"
    assert set(REPEATS_KEPT) - repeated == set(), "a reason for a name no longer repeated"
    assert len(repeated) <= 12
