"""The standalone's settings: every setting of its broker and of its bookies is reachable from its config
file and its environment, flat (by the setting's own name, as in ``magnetar broker`` / ``magnetar bookie``)
and in the ``[broker]`` / ``[bookie]`` tables; what the standalone sets itself is refused or ignored."""

from __future__ import annotations

import functools
import json
import os
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from magnetar.admin.cli import main as cli
from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.config import (
    ConfigError,
    LoadedSettings,
    Source,
    load_settings,
    render_json,
    render_toml,
)
from magnetar.admin.processes.standalone_settings import (
    SET_BY_STANDALONE,
    STANDALONE_BOOKIE_DEFAULTS,
    StandaloneSettings,
)
from magnetar.broker.settings import BrokerSettings

PARTS: dict[str, type[pydantic.BaseModel]] = {"broker": BrokerSettings, "bookie": BookieSettings}

COMPANIONS: dict[str, dict[str, Any]] = {
    # settings that are only valid together with others
    "authentication_enabled": {"token_secret_key": "data:;base64,c2VjcmV0"},
    "tls_certificate_file": {"tls_key_file": Path("/etc/reach/key.pem")},
    "tls_key_file": {"tls_certificate_file": Path("/etc/reach/cert.pem")},
    "http_port_tls": {
        "tls_certificate_file": Path("/etc/reach/cert.pem"),
        "tls_key_file": Path("/etc/reach/key.pem"),
    },
    "broker_service_port_tls": {
        "tls_certificate_file": Path("/etc/reach/cert.pem"),
        "tls_key_file": Path("/etc/reach/key.pem"),
    },
    "tls_require_trusted_client_cert": {"tls_trust_certs_file": Path("/etc/reach/ca.pem")},
    "token_audience_claim": {"token_audience": "reach"},
    "token_audience": {"token_audience_claim": "aud"},
    "bookkeeper_tls_certificate_file": {"bookkeeper_tls_key_file": Path("/etc/reach/bk-key.pem")},
    "bookkeeper_tls_key_file": {"bookkeeper_tls_certificate_file": Path("/etc/reach/bk-cert.pem")},
    # the message size chain: smaller entries need smaller WebSocket messages
    "client.entry_payload_bytes_max": {"ws_frame_bytes_max": 1024 * 1024},
    # the internal listener is one of the advertised listeners
    "internal_listener_name": {"advertised_listeners": "reach-value:pulsar://reach:6650"},
}
FORMATTED: dict[str, list[Any]] = {"advertised_listeners": ["reach:pulsar://reach:6650"]}
"""Settings whose strings have a format: values of it (any other string is refused)."""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MAGNETAR_"):
            monkeypatch.delenv(name)


def leaves(model: type[pydantic.BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted name, annotation)`` of every setting of ``model``, nested models' settings included."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            yield from leaves(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", annotation


def candidates(annotation: Any, current: Any) -> list[Any]:
    """Values of the setting's type other than ``current``, most modest first."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return candidates(args[0], current)
    if origin in (typing.Union, types.UnionType):
        return [value for arg in args if arg is not type(None) for value in candidates(arg, current)]
    if origin is typing.Literal:
        return [choice for choice in args if choice != current]
    if annotation is bool:
        return [not current] if isinstance(current, bool) else [True, False]
    if annotation is int:
        base = current if isinstance(current, int) else 1
        return [v for v in (base + 1, base - 1, base * 2, base // 2, 1, 1024) if v != current]
    if annotation is float:
        base = current if isinstance(current, float | int) else 1.0
        return [v for v in (base + 1.0, (base + 1.0) / 2, base / 2, base * 2, 0.5) if v != current]
    if annotation is str:
        return ["reach-value"]
    if annotation is pydantic.SecretStr:
        return [pydantic.SecretStr("reach-secret")]
    if annotation is Path:
        return [Path("/etc/reach/file")]
    if origin is tuple:
        return [("role-a", "role-b")]
    raise AssertionError(f"no candidate values for {annotation!r}: teach the test this type")


def env_text(value: Any) -> str:
    if isinstance(value, pydantic.SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def toml_text(value: Any) -> str:
    if isinstance(value, pydantic.SecretStr):
        return json.dumps(value.get_secret_value())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(json.dumps(item) for item in value) + "]"
    return json.dumps(str(value))


def dotted_get(model: pydantic.BaseModel, dotted: str) -> Any:
    value: Any = model
    for name in dotted.split("."):
        value = getattr(value, name)
    return value


def toml_file(path: Path, values: dict[str, Any], table: str | None) -> Path:
    """A config file setting ``values`` (dotted names), flat or inside ``[table]``."""
    by_table: dict[str, list[str]] = {}
    for dotted, value in values.items():
        *tables, name = dotted.split(".")
        header = ".".join(([table] if table else []) + tables)
        by_table.setdefault(header, []).append(f"{name} = {toml_text(value)}")
    lines = [*by_table.pop("", [])]
    for header, body in by_table.items():
        lines += [f"[{header}]", *body]
    path.write_text("\n".join(lines) + "\n")
    return path


def load_file(path: Path) -> LoadedSettings[StandaloneSettings]:
    return load_settings(StandaloneSettings, {}, path)


def load_env(monkeypatch: pytest.MonkeyPatch, values: dict[str, Any], table: str | None) -> Any:
    with monkeypatch.context() as env:
        for dotted, value in values.items():
            name = "__".join(([table] if table else []) + dotted.split(".")).upper()
            env.setenv(f"MAGNETAR_{name}", env_text(value))
        return load_settings(StandaloneSettings, {}, None)


@functools.cache
def defaults() -> StandaloneSettings:
    return StandaloneSettings()


def reachable_value(
    part: str, dotted: str, annotation: Any, tmp_path: Path
) -> tuple[Any, dict[str, Any], StandaloneSettings]:
    """A value (and its companions) that the flat name gives the part, checked through a config file."""
    default = dotted_get(getattr(defaults(), part), dotted)
    failures = []
    for value in FORMATTED.get(dotted) or candidates(annotation, default):
        values = {dotted: value, **COMPANIONS.get(dotted, {})}
        try:
            loaded = load_file(toml_file(tmp_path / "flat.toml", values, None))
        except ConfigError as exc:
            failures.append(f"{value!r}: {exc}")
            continue
        got = dotted_get(getattr(loaded.settings, part), dotted)
        assert got == value, f"{part}.{dotted} = {value!r} in the file gave {got!r}"
        return value, values, loaded.settings
    raise AssertionError(f"{part}.{dotted}: no value of its type validates: {failures}")


def part_settings() -> list[tuple[str, str, Any]]:
    return [
        (part, dotted, annotation)
        for part, model in PARTS.items()
        for dotted, annotation in leaves(model)
        if dotted.split(".")[0] not in SET_BY_STANDALONE[part]
    ]


@pytest.mark.parametrize(("part", "dotted", "annotation"), part_settings(), ids=lambda v: str(v)[:40])
def test_every_broker_and_bookie_setting_reaches_the_standalone_from_file_and_environment(
    part: str, dotted: str, annotation: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value, values, flat = reachable_value(part, dotted, annotation, tmp_path)
    in_table = load_file(toml_file(tmp_path / "table.toml", values, part))
    assert dotted_get(getattr(in_table.settings, part), dotted) == value
    assert in_table.source_of(f"{part}.{dotted}") is Source.FILE
    for table in (None, part):
        loaded = load_env(monkeypatch, values, table)
        assert dotted_get(getattr(loaded.settings, part), dotted) == value, f"env, table {table}"
        assert loaded.source_of(f"{part}.{dotted}") is Source.ENV
        label = json.loads(render_json(loaded))["sources"][f"{part}.{dotted}"]
        assert label == f"env MAGNETAR_{'__'.join(([table] if table else []) + dotted.split('.')).upper()}"
    if part == "bookie":
        assert dotted_get(flat.bookie_settings(1), dotted) == value


def test_every_setting_the_standalone_sets_itself_names_a_real_setting() -> None:
    for part, names in SET_BY_STANDALONE.items():
        assert set(names) <= set(PARTS[part].model_fields), part


def test_the_issue_example_retention_check_interval_in_the_file(tmp_path: Path) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text("retention_check_interval_s = 10\n")
    loaded = load_settings(StandaloneSettings, {}, config)
    assert loaded.settings.broker_settings().retention_check_interval_s == 10
    assert loaded.given_as["broker.retention_check_interval_s"] == "retention_check_interval_s"


def test_a_flat_name_reaches_every_part_that_has_it_and_a_table_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text(
        'authentication_enabled = true\ntoken_secret_key = "data:;base64,c2VjcmV0"\n'
        "token_allowed_clock_skew_seconds = 5\n[bookie]\ntoken_allowed_clock_skew_seconds = 7\n"
    )
    settings = load_settings(StandaloneSettings, {"bookies": 2}, config).settings
    assert settings.broker.authentication_enabled
    assert all(settings.bookie_settings(i).authentication_enabled for i in range(2))
    assert settings.broker.token_allowed_clock_skew_seconds == 5
    assert settings.bookie.token_allowed_clock_skew_seconds == 7  # its table, same source
    monkeypatch.setenv("MAGNETAR_TOKEN_ALLOWED_CLOCK_SKEW_SECONDS", "9")
    from_env = load_settings(StandaloneSettings, {}, config).settings
    assert from_env.bookie.token_allowed_clock_skew_seconds == 9  # the environment over the file


def test_what_the_standalone_sets_itself_is_refused_in_a_file_and_ignored_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flat = tmp_path / "flat.toml"
    flat.write_text("port = 4000\n")
    with pytest.raises(
        ConfigError, match=r"port \(config file .*\): the standalone sets it itself: bookie_port"
    ):
        load_settings(StandaloneSettings, {}, flat)
    table = tmp_path / "table.toml"
    table.write_text("[broker]\nhttp_port = 9000\n")
    with pytest.raises(ConfigError, match=r"broker\.http_port .*the standalone's http_port"):
        load_settings(StandaloneSettings, {}, table)
    monkeypatch.setenv("MAGNETAR_PORT", "4000")
    monkeypatch.setenv("MAGNETAR_METADATA_URL", "zk:127.0.0.1:2181")
    monkeypatch.setenv("MAGNETAR_ADVERTISED_ADDRESS", "broker.example")  # the broker's; the bookies' is set
    loaded = load_settings(StandaloneSettings, {"bookie_port": 5000, "data_dir": str(tmp_path)}, None)
    assert loaded.settings.bookie_settings(1).port == 5001
    assert loaded.settings.broker.metadata_url == f"rocksdb://{tmp_path.resolve() / 'metadata'}"
    assert loaded.settings.broker.advertised_address == "broker.example"
    assert loaded.settings.bookie.advertised_address == "127.0.0.1"
    assert len(loaded.ignored) == 2
    assert any("MAGNETAR_PORT is ignored" in warning for warning in loaded.ignored)
    monkeypatch.setenv("MAGNETAR_BOOKIE__PORT", "4000")  # aimed at the standalone's bookies: an error
    with pytest.raises(ConfigError, match=r"bookie\.port \(env\)"):
        load_settings(StandaloneSettings, {}, None)


def test_an_unknown_flat_name_is_an_error_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text("retention_check_interval = 10\n")
    with pytest.raises(
        ConfigError, match=r"unknown setting retention_check_interval .*config show standalone"
    ):
        load_settings(StandaloneSettings, {}, config)
    nested = tmp_path / "nested.toml"
    nested.write_text("[bookie.gc]\ngc_wait = 1\n")
    with pytest.raises(ConfigError, match=r"unknown setting bookie\.gc\.gc_wait"):
        load_settings(StandaloneSettings, {}, nested)


def test_the_standalone_defaults_are_labelled_and_overridable(tmp_path: Path) -> None:
    loaded = load_settings(StandaloneSettings, {}, None)
    engine = loaded.settings.bookie.storage_engine
    assert engine.entry_log_bytes_max == STANDALONE_BOOKIE_DEFAULTS["storage_engine"]["entry_log_bytes_max"]
    assert loaded.settings.broker.publish_inflight_entries_max == 1
    assert loaded.source_of("bookie.gc.gc_wait_time_s") is Source.PART_DEFAULT
    text = render_toml(loaded)
    assert "gc_wait_time_s = 60.0  # standalone default" in text
    assert "# port = 3181  # set by the standalone: bookie_port + i for bookie i" in text
    config = tmp_path / "standalone.toml"
    config.write_text("[gc]\ngc_wait_time_s = 120\nminor_compaction_interval_s = 600\n")
    again = load_settings(StandaloneSettings, {}, config).settings
    assert again.bookie.gc.gc_wait_time_s == 120
    assert again.bookie.gc.major_compaction_interval_s == 1800  # the other standalone defaults stay


def test_the_rendered_file_gives_the_same_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGNETAR_RETENTION_CHECK_INTERVAL_S", "15")
    monkeypatch.setenv("MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS", "1")
    loaded = load_settings(StandaloneSettings, {"bookies": 2, "data_dir": str(tmp_path)}, None)
    text = render_toml(loaded)
    assert "retention_check_interval_s = 15.0  # env MAGNETAR_RETENTION_CHECK_INTERVAL_S" in text
    monkeypatch.delenv("MAGNETAR_RETENTION_CHECK_INTERVAL_S")
    monkeypatch.delenv("MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS")
    rendered = tmp_path / "rendered.toml"
    rendered.write_text(text)
    assert load_settings(StandaloneSettings, {}, rendered).settings == loaded.settings


def test_config_show_standalone_lists_every_setting_with_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAGNETAR_RETENTION_CHECK_INTERVAL_S", "15")
    assert cli.main(["config", "show", "standalone", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "MAGNETAR_RETENTION_CHECK_INTERVAL_S" not in captured.err  # a broker setting, not unknown
    sources = json.loads(captured.out)["sources"]
    for part, model in PARTS.items():
        for dotted, _ in leaves(model):
            assert f"{part}.{dotted}" in sources
    assert sources["broker.retention_check_interval_s"] == "env MAGNETAR_RETENTION_CHECK_INTERVAL_S"
    assert sources["bookie.port"].startswith("set by the standalone")


def test_a_flat_table_and_the_parts_table_merge_key_by_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "standalone.toml"
    config.write_text(
        "[storage_engine]\njournal_group_wait_ms = 1\nread_cache_bytes_max = 2048\n"
        "[bookie.storage_engine]\nread_cache_bytes_max = 1000\n"
    )
    monkeypatch.setenv("MAGNETAR_STORAGE_ENGINE__READ_AHEAD_ENTRIES", "7")
    loaded = load_settings(StandaloneSettings, {}, config)
    engine = loaded.settings.bookie.storage_engine
    assert engine.journal_group_wait_ms == 1
    assert engine.read_cache_bytes_max == 1000  # the part's table wins over the flat table, key by key
    assert engine.read_ahead_entries == 7
    assert engine.entry_log_bytes_max == STANDALONE_BOOKIE_DEFAULTS["storage_engine"]["entry_log_bytes_max"]
    sources = json.loads(render_json(loaded))["sources"]
    assert (
        sources["bookie.storage_engine.read_ahead_entries"]
        == "env MAGNETAR_STORAGE_ENGINE__READ_AHEAD_ENTRIES"
    )
    assert sources["bookie.storage_engine.read_cache_bytes_max"] == f"file {config}"
