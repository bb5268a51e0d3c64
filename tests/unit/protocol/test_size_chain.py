"""The message size chain (WebSocket message -> entry payload -> bookie entry -> bookie frame) is checked once
across the layers: an impossible combination is refused when the settings are loaded, naming both settings
and the fix, and the shipped defaults pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.processes.config import ConfigError, load_settings
from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.bookkeeper.protocol.size_chain import ENVELOPE_BYTES, SizeLimit, check_size_chain
from magnetar.broker.settings import BrokerSettings

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("MAGNETAR_"):
            monkeypatch.delenv(name)


def test_the_shipped_defaults_pass() -> None:
    BrokerSettings()
    StandaloneSettings()


sizes = st.integers(min_value=1, max_value=2**40)


@given(ws=sizes, payload=sizes, entry=sizes, frame=sizes)
def test_the_chain_is_refused_exactly_when_a_link_cannot_carry_the_one_before(
    ws: int, payload: int, entry: int, frame: int
) -> None:
    possible = payload + ENVELOPE_BYTES >= ws and payload + ENVELOPE_BYTES <= min(entry, frame)
    try:
        check_size_chain(
            ws_frame=SizeLimit("ws_frame_bytes_max", ws),
            entry_payload=SizeLimit("entry_payload_bytes_max", payload),
            bookie_entry=SizeLimit("storage_engine.entry_bytes_max", entry),
            bookie_frames=(SizeLimit("frame_bytes_max", frame),),
        )
    except ValueError as refusal:
        assert not possible
        message = str(refusal)
        assert "entry_payload_bytes_max" in message  # every link names the payload and the other setting
        assert (
            sum(name in message for name in ("ws_frame_bytes_max", "entry_bytes_max", "frame_bytes_max")) >= 1
        )
        assert "at most" in message
    else:
        assert possible


def test_a_websocket_bound_the_entries_cannot_store_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MAGNETAR_WS_FRAME_BYTES_MAX", str(8 * MIB))
    with pytest.raises(ConfigError) as refusal:
        load_settings(BrokerSettings, {})
    message = str(refusal.value)
    assert "entry_payload_bytes_max=5241856 cannot carry the messages ws_frame_bytes_max=8388608" in message
    assert "raise entry_payload_bytes_max to at least 8387584 or lower ws_frame_bytes_max" in message


def test_entries_larger_than_the_brokers_bookie_frames_are_refused_at_load(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f"ws_frame_bytes_max = {MIB}\n[client]\nentry_payload_bytes_max = {6 * MIB}\n")
    with pytest.raises(ConfigError, match="the broker's bookie frames=5242880 cannot carry the entries "):
        load_settings(BrokerSettings, {}, config)
    # lowering both is a possible combination
    config.write_text(f"ws_frame_bytes_max = {MIB}\nentry_payload_bytes_max = {MIB}\n")
    assert load_settings(BrokerSettings, {}, config).settings.client.entry_payload_bytes_max == MIB


@pytest.mark.parametrize(
    ("table", "setting"),
    [("[bookie.storage_engine]", "entry_bytes_max"), ("[bookie]", "frame_bytes_max")],
)
def test_the_standalone_refuses_bookies_that_cannot_store_its_entries(
    tmp_path: Path, table: str, setting: str
) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text(f"{table}\n{setting} = {MIB}\n")
    with pytest.raises(ConfigError) as refusal:
        load_settings(StandaloneSettings, {}, config)
    message = str(refusal.value)
    assert f"{setting}=1048576 cannot carry the entries entry_payload_bytes_max=5241856" in message
    assert "lower entry_payload_bytes_max to at most 1047552" in message


@pytest.mark.processes
def test_magnetar_broker_refuses_to_start_with_an_impossible_chain(tmp_path: Path) -> None:
    """The refusal at start, as an operator sees it: the process exits before it binds anything."""
    environment = {"PATH": "/usr/bin:/bin", "MAGNETAR_WS_FRAME_BYTES_MAX": str(16 * MIB)}
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.admin.cli", "broker", "--http-port", "0"],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "ws_frame_bytes_max=16777216" in done.stderr
    assert "entry_payload_bytes_max" in done.stderr
