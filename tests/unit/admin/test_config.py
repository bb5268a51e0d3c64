"""Settings sources: flags > environment > TOML config file > defaults, with the source of every value."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from magnetar.admin.cli import main as cli
from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.config import (
    ConfigError,
    Source,
    config_file_from,
    load_settings,
    render_json,
    render_toml,
    unknown_environment,
)
from magnetar.admin.processes.standalone import ENVIRONMENT_MODELS, StandaloneSettings
from magnetar.broker.settings import BrokerSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MAGNETAR_* variable of the machine running the tests leaks into these."""
    for name in list(os.environ):
        if name.upper().startswith("MAGNETAR_"):
            monkeypatch.delenv(name)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_precedence_is_flags_then_environment_then_file_then_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(
        tmp_path / "broker.toml",
        'metadata_url = "zk:10.0.0.1:2181"\nhttp_port = 9000\ncluster = "from-file"\nensemble_size = 3\n',
    )
    monkeypatch.setenv("MAGNETAR_HTTP_PORT", "9100")
    monkeypatch.setenv("MAGNETAR_CLUSTER", "from-env")
    loaded = load_settings(BrokerSettings, {"cluster": "from-flag", "ack_quorum": None}, config)
    settings = loaded.settings
    assert settings.cluster == "from-flag"  # flag over env over file
    assert settings.http_port == 9100  # env over file
    assert settings.metadata_url == "zk:10.0.0.1:2181"  # file over default
    assert settings.ensemble_size == 3
    assert settings.ack_quorum == 2  # default (a flag given as None is no flag)
    assert loaded.source_of("cluster") is Source.FLAG
    assert loaded.source_of("http_port") is Source.ENV
    assert loaded.source_of("metadata_url") is Source.FILE
    assert loaded.source_of("ack_quorum") is Source.DEFAULT


def test_nested_tables_merge_key_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(
        tmp_path / "bookie.toml",
        "[storage_engine]\njournal_group_wait_ms = 3\nread_cache_bytes_max = 1000\n",
    )
    monkeypatch.setenv("MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS", "1")
    loaded = load_settings(BookieSettings, {}, config)
    engine = loaded.settings.storage_engine
    assert engine.journal_group_wait_ms == 1.0
    assert engine.read_cache_bytes_max == 1000
    assert engine.write_cache_bytes_max == 64 * 1024 * 1024
    assert loaded.source_of("storage_engine.journal_group_wait_ms") is Source.ENV
    assert loaded.source_of("storage_engine.read_cache_bytes_max") is Source.FILE
    assert loaded.source_of("storage_engine.write_cache_bytes_max") is Source.DEFAULT


def test_an_unknown_key_in_the_file_is_an_error_naming_it(tmp_path: Path) -> None:
    config = write(tmp_path / "bookie.toml", "prot = 3181\n")
    with pytest.raises(ConfigError, match="unknown setting prot"):
        load_settings(BookieSettings, {}, config)
    nested = write(tmp_path / "nested.toml", "[storage_engine]\njournal_wait = 1\n")
    with pytest.raises(ConfigError, match=r"unknown setting storage_engine\.journal_wait"):
        load_settings(BookieSettings, {}, nested)


def test_bad_files_and_values_say_where_they_come_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(BookieSettings, {}, tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(BookieSettings, {}, write(tmp_path / "broken.toml", "port = \n"))
    with pytest.raises(ConfigError, match="port comes from the config file"):
        load_settings(BookieSettings, {}, write(tmp_path / "typed.toml", 'port = "x"\n'))
    monkeypatch.setenv("MAGNETAR_PORT", "70000")
    with pytest.raises(ConfigError, match=r"port comes from the environment \(MAGNETAR_PORT\)"):
        load_settings(BookieSettings, {}, None)
    monkeypatch.delenv("MAGNETAR_PORT")
    # relations between values are checked whatever their sources
    with pytest.raises(ConfigError, match="ack_quorum <= write_quorum"):
        load_settings(BrokerSettings, {"ack_quorum": 3}, write(tmp_path / "q.toml", "write_quorum = 2\n"))


def test_the_config_file_comes_from_the_flag_else_the_environment(tmp_path: Path) -> None:
    assert config_file_from(None, {}) is None
    assert config_file_from(None, {"MAGNETAR_CONFIG": "/etc/m.toml"}) == Path("/etc/m.toml")
    assert config_file_from("x.toml", {"MAGNETAR_CONFIG": "/etc/m.toml"}) == Path("x.toml")


def test_unknown_environment_variables_are_reported() -> None:
    environ = {
        "MAGNETAR_BIND": "0.0.0.0",  # the Helm chart once set this; the setting is bind_address
        "MAGNETAR_BIND_ADDRESS": "0.0.0.0",
        "MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS": "1",
        "MAGNETAR_LOG_LEVEL": "INFO",
        "MAGNETAR_CONFIG": "x.toml",
        "MAGNETAR_LOOP_MONITOR_MS": "10",  # read by the process itself (the event-loop monitor)
        "PATH": "/bin",
    }
    assert unknown_environment((BookieSettings,), environ) == ["MAGNETAR_BIND"]
    assert unknown_environment((BrokerSettings,), environ) == [
        "MAGNETAR_BIND",
        "MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS",
    ]


def test_a_standalone_knows_what_its_broker_and_bookies_read(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {
        "MAGNETAR_STORAGE_ENGINE__CHECKPOINT_GIVE_WAY_MS": "0",
        "MAGNETAR_PUBLISH_BATCH_MESSAGES_MAX": "500",
        "MAGNETAR_BOOKIES": "1",
        "MAGNETAR_BIND": "0.0.0.0",
    }
    assert unknown_environment(ENVIRONMENT_MODELS, environ) == ["MAGNETAR_BIND"]
    monkeypatch.setenv("MAGNETAR_STORAGE_ENGINE__CHECKPOINT_GIVE_WAY_MS", "0")
    monkeypatch.setenv("MAGNETAR_PUBLISH_BATCH_MESSAGES_MAX", "500")
    settings = StandaloneSettings()
    assert settings.bookie_settings(0).storage_engine.checkpoint_give_way_ms == 0
    assert settings.broker_settings().publish_batch_messages_max == 500


def test_rendered_toml_is_a_config_file_giving_the_same_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAGNETAR_PORT", "4181")
    config = write(tmp_path / "bookie.toml", "[storage_engine]\njournal_group_wait_ms = 2.5\n")
    loaded = load_settings(BookieSettings, {"advertised_address": "bookie-0"}, config)
    text = render_toml(loaded)
    assert "port = 4181  # env MAGNETAR_PORT" in text
    assert 'advertised_address = "bookie-0"  # flag' in text
    assert f"journal_group_wait_ms = 2.5  # file {config}" in text
    assert "# journal_dir is unset  # default" in text
    monkeypatch.delenv("MAGNETAR_PORT")
    again = load_settings(BookieSettings, {}, write(tmp_path / "rendered.toml", text))
    assert again.settings == loaded.settings
    assert tomllib.loads(text)["port"] == 4181


def test_rendered_json_lists_values_and_sources(tmp_path: Path) -> None:
    loaded = load_settings(StandaloneSettings, {"bookies": 3}, None)
    document = json.loads(render_json(loaded))
    assert document["settings"]["bookies"] == 3
    assert document["sources"]["bookies"] == "flag"
    assert document["sources"]["http_port"] == "default"


def test_config_show_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "broker.toml", "http_port = 9001\n")
    monkeypatch.setenv("MAGNETAR_CLUSTER", "east")
    monkeypatch.setenv("MAGNETAR_TYPO", "1")
    assert cli.main(["config", "show", "broker", "--config", str(config), "--format", "json"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["settings"]["http_port"] == 9001
    assert document["sources"]["cluster"] == "env MAGNETAR_CLUSTER"
    assert "MAGNETAR_TYPO" in captured.err
    monkeypatch.setenv("MAGNETAR_CONFIG", str(write(tmp_path / "bad.toml", "nope = 1\n")))
    assert cli.main(["config", "show", "bookie"]) == 2
    assert "unknown setting nope" in capsys.readouterr().err


def test_a_process_refuses_a_bad_config_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = write(tmp_path / "bookie.toml", "port = -1\n")
    assert cli.main(["bookie", "--config", str(config)]) == 2
    assert "port comes from the config file" in caplog.text
