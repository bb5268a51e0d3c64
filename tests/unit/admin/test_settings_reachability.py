"""Every setting of every process kind is reachable from every source: its flag (where it has one), its
environment variable ``MAGNETAR_<NAME>`` and its config file key; and the standalone reaches every setting of
its broker and of its bookies, flat and in their tables.

Settings shared by several process kinds are declared once (inherited models); this guards the other half of
that promise: whatever model declares a field, each process that has it reads it from each source. A value is
given through one source at a time and :func:`load_settings` must attribute it to that source and keep it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic import SecretStr, TypeAdapter
from pydantic_settings import BaseSettings, NoDecode

from magnetar.admin.cli import main as cli
from magnetar.admin.cli.subcommands import load_every_subcommand
from magnetar.admin.processes.autorecovery_wiring import AutoRecoveryProcessSettings, BookieProcessSettings
from magnetar.admin.processes.cluster_init import MetadataClientSettings
from magnetar.admin.processes.config import Source, _toml_value, load_settings
from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.broker.settings import BrokerSettings

KINDS: dict[str, type[BaseSettings]] = {
    "bookie": BookieProcessSettings,
    "autorecovery": AutoRecoveryProcessSettings,
    "broker": BrokerSettings,
    "standalone": StandaloneSettings,
    "initialize-cluster-metadata": MetadataClientSettings,
}
"""Command -> the settings model of that process kind."""

COMMAND_ARGUMENTS: dict[str, set[str]] = {
    "bookie": {"format_data", "force"},  # what to do with the cookie at start, not a setting
    "broker": {"port_file"},  # where this run reports its ports
    "standalone": set(),
    "autorecovery": set(),
    "initialize-cluster-metadata": {
        "web_service_url",
        "web_service_url_tls",
        "broker_service_url",
        "broker_service_url_tls",
        "bundles",
        "attempts_max",
        "retry_delay_s",
    },  # what to write: the command's arguments
}
"""Flags of a command that are arguments of that one run rather than settings of the process."""

FLAG_SETTINGS: dict[str, str] = {"autorecovery_enabled": "autorecovery.enabled"}
"""Flags whose destination names a nested setting (``--no-autorecovery``)."""


def leaves(model: type[pydantic.BaseModel], prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted name, field info, default) of every leaf setting, nested models included."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            yield from leaves(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info, info.get_default(call_default_factory=True)


def settable(model: type[pydantic.BaseModel]) -> list[tuple[str, Any, Any]]:
    """The leaves whose default can be written in every source (not None, not a secret)."""
    return [
        (name, info, default)
        for name, info, default in leaves(model)
        if default is not None and not isinstance(default, SecretStr)
    ]


def env_text(info: Any, value: Any) -> str:
    plain = TypeAdapter(info.annotation).dump_python(value, mode="json")
    if any(isinstance(meta, NoDecode) or meta is NoDecode for meta in info.metadata):
        return ",".join(plain)
    if isinstance(plain, bool):
        return "true" if plain else "false"
    return json.dumps(plain) if isinstance(plain, list | dict) else str(plain)


def toml_text(dotted: str, info: Any, value: Any) -> str:
    plain = TypeAdapter(info.annotation).dump_python(value, mode="json")
    *tables, key = dotted.split(".")
    header = f"[{'.'.join(tables)}]\n" if tables else ""
    return f"{header}{key} = {_toml_value(plain)}\n"


def value_at(settings: pydantic.BaseModel, dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def env_name(dotted: str) -> str:
    return "MAGNETAR_" + dotted.replace(".", "__").upper()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("MAGNETAR_"):
            monkeypatch.delenv(name)


def own_cases() -> list[tuple[str, str]]:
    return [
        (kind, dotted)
        for kind, model in KINDS.items()
        if kind != "standalone"
        for dotted, _, _ in settable(model)
    ]


@pytest.mark.parametrize(("kind", "dotted"), own_cases())
def test_a_setting_is_read_from_the_environment_and_the_config_file(
    kind: str, dotted: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = KINDS[kind]
    _, info, value = next(leaf for leaf in settable(model) if leaf[0] == dotted)
    monkeypatch.setenv(env_name(dotted), env_text(info, value))
    loaded = load_settings(model, {})
    assert loaded.source_of(dotted) is Source.ENV
    assert value_at(loaded.settings, dotted) == value
    monkeypatch.delenv(env_name(dotted))
    config = tmp_path / "c.toml"
    config.write_text(toml_text(dotted, info, value))
    loaded = load_settings(model, {}, config)
    assert loaded.source_of(dotted) is Source.FILE
    assert value_at(loaded.settings, dotted) == value


def part_cases() -> list[tuple[str, str]]:
    parts = StandaloneSettings.PARTS
    return [
        (part, dotted)
        for part, model in parts.models.items()
        for dotted, _, _ in settable(model)
        if dotted.split(".")[0] not in parts.set_by_process.get(part, {})
        and dotted.split(".")[0] not in StandaloneSettings.model_fields
    ]


@pytest.mark.parametrize(("part", "dotted"), part_cases())
def test_the_standalone_reaches_every_setting_of_its_broker_and_bookies(
    part: str, dotted: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Flat (as in the part's own environment and file) and in the part's table, from both sources."""
    model = StandaloneSettings.PARTS.models[part]
    _, info, _ = next(leaf for leaf in settable(model) if leaf[0] == dotted)
    target = f"{part}.{dotted}"
    value = value_at(StandaloneSettings(), target)  # the standalone's default, which fits its other defaults
    for name in (dotted, target):
        monkeypatch.setenv(env_name(name), env_text(info, value))
        loaded = load_settings(StandaloneSettings, {})
        assert loaded.source_of(target) is Source.ENV, name
        assert value_at(loaded.settings, target) == value, name
        monkeypatch.delenv(env_name(name))
        config = tmp_path / "c.toml"
        config.write_text(toml_text(name, info, value))
        loaded = load_settings(StandaloneSettings, {}, config)
        assert loaded.source_of(target) is Source.FILE, name
        assert value_at(loaded.settings, target) == value, name


def test_every_flag_names_a_setting_of_its_process() -> None:
    """A flag's destination is a setting of the process kind (for the standalone: its own, or a setting of
    its broker or bookies that the flat name reaches)."""
    parser = cli.build_parser()
    load_every_subcommand(parser)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    process_options = {"help", "config", "command", "_module"}
    checked = 0
    for kind, model in KINDS.items():
        subparser = commands.choices[kind]
        known = set(model.model_fields) | {
            flag for flag, dotted in FLAG_SETTINGS.items() if dotted in {leaf[0] for leaf in leaves(model)}
        }
        parts = getattr(model, "PARTS", None)
        if parts is not None:
            known |= {name for part in parts.models.values() for name in part.model_fields}
        for action in subparser._actions:
            if not action.option_strings or action.dest in process_options | COMMAND_ARGUMENTS[kind]:
                continue
            assert action.dest in known, f"magnetar {kind} {action.option_strings[0]} names no setting"
            checked += 1
    assert checked > 20


def test_the_cases_cover_the_shared_settings() -> None:
    """The settings declared once and inherited are among those checked, for each process that has them."""
    cases = set(own_cases())
    for kind in ("bookie", "broker", "initialize-cluster-metadata"):
        assert (kind, "metadata_operation_timeout_ms") in cases
        assert (kind, "zk_tls_enabled") in cases
    for kind in ("bookie", "broker"):
        assert (kind, "tls_require_trusted_client_cert") in cases
        assert (kind, "token_allowed_clock_skew_seconds") in cases
    assert ("broker", "retention_check_interval_s") in cases
    assert ("broker", "admin_requests_burst") in cases
    assert ("bookie", "storage_engine.journal_group_wait_ms") in cases
    parts = set(part_cases())
    assert ("bookie", "gc.gc_wait_time_s") in parts
    assert ("broker", "default_retention_size_mb") in parts
