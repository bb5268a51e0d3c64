"""Where a process's settings come from: flags > environment > config file > defaults.

Every process kind has one pydantic-settings model (``BookieSettings``, ``BrokerSettings``,
``StandaloneSettings``). :func:`load_settings` builds it from four sources, each overriding the next:

1. command-line flags (the ``overrides`` the ``cmd_*`` module collected: only flags actually given);
2. environment variables ``MAGNETAR_<NAME>`` (nested: ``MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS``), as
   the Helm chart sets them;
3. a TOML config file (``--config FILE`` or ``MAGNETAR_CONFIG``) whose keys are the settings' names, nested
   models as tables::

       metadata_url = "zk:127.0.0.1:2181/magnetar"
       port = 3181
       [storage_engine]
       journal_group_wait_ms = 1

4. the model's defaults.

TOML because Python reads it without a dependency (``tomllib``) and it has typed scalars and tables, so a
file holds exactly what the environment can. Nested tables merge key by key (the environment can override one
key of ``storage_engine`` and the file another). An unknown key in the file is an error naming the key (a
typo must not silently fall back to a default); an unknown ``MAGNETAR_*`` environment variable is logged as a
warning for the same reason (the environment is shared with other programs, so it cannot be an error).

The values are merged first and validated once (``model_validate``), so a value is checked the same way
wherever it comes from, and :class:`LoadedSettings` remembers which source gave each one (``magnetar config
show``).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pydantic
from pydantic_settings import BaseSettings, EnvSettingsSource

from magnetar.bookkeeper.runtime import loop_monitor

log = logging.getLogger(__name__)

S = TypeVar("S", bound=BaseSettings)

ENV_PREFIX = "MAGNETAR_"
CONFIG_ENV = "MAGNETAR_CONFIG"
"""Environment variable naming the config file when ``--config`` is not given."""
PROCESS_ENV = frozenset({CONFIG_ENV, "MAGNETAR_LOG_LEVEL", loop_monitor.ENVIRONMENT_VARIABLE})
"""``MAGNETAR_*`` variables read by the command line itself rather than by a settings model."""


class Source(enum.StrEnum):
    FLAG = "flag"
    ENV = "env"
    FILE = "file"
    DEFAULT = "default"


class ConfigError(ValueError):
    """A config file that cannot be read, or settings that do not validate; the message says which."""


@dataclass(frozen=True, slots=True)
class LoadedSettings(Generic[S]):
    settings: S
    sources: dict[str, Source]
    """Dotted setting name (``storage_engine.journal_group_wait_ms``) -> the source that gave its value;
    settings not listed have their default."""
    config_file: Path | None = None

    def source_of(self, name: str) -> Source:
        return self.sources.get(name, Source.DEFAULT)


def config_file_from(flag: str | Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: ``--config``, else ``MAGNETAR_CONFIG``, else none."""
    environ = os.environ if environ is None else environ
    chosen = flag if flag else environ.get(CONFIG_ENV)
    return Path(chosen) if chosen else None


def load_settings(
    model: type[S], overrides: Mapping[str, Any], config_file: Path | None = None
) -> LoadedSettings[S]:
    """Build ``model`` from flags (``overrides``), the environment, ``config_file`` and defaults.

    Raises :class:`ConfigError` for an unreadable file, an unknown key in it, or values that do not validate.
    """
    file_values = read_config_file(model, config_file) if config_file is not None else {}
    env_values = environment_values(model)
    flag_values = {name: value for name, value in overrides.items() if value is not None}
    merged: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for values, source in ((file_values, Source.FILE), (env_values, Source.ENV), (flag_values, Source.FLAG)):
        _merge(merged, values, sources, source, prefix="")
    try:
        settings = model.model_validate(merged)
    except pydantic.ValidationError as exc:
        where = _describe_sources(exc, sources, config_file)
        raise ConfigError(f"invalid {model.__name__}: {exc}{where}") from None
    return LoadedSettings(settings, sources, config_file)


def read_config_file(model: type[BaseSettings], path: Path) -> dict[str, Any]:
    """The file's values, checked to name only settings of ``model`` (nested tables included)."""
    try:
        with path.open("rb") as file:
            values = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    _check_keys(model, values, path, prefix="")
    return values


def environment_values(model: type[BaseSettings]) -> dict[str, Any]:
    """What the environment sets for ``model`` (pydantic-settings' own parsing: prefix, nesting, JSON)."""
    values: dict[str, Any] = EnvSettingsSource(model)()
    return values


def unknown_environment(
    models: tuple[type[BaseSettings], ...], environ: Mapping[str, str] | None = None
) -> list[str]:
    """``MAGNETAR_*`` variables that name no setting of any of ``models`` (nor a process variable)."""
    environ = os.environ if environ is None else environ
    known = {ENV_PREFIX + name.upper() for model in models for name in model.model_fields}
    unknown = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in PROCESS_ENV:
            continue
        if upper.split("__", 1)[0] not in known:
            unknown.append(name)
    return unknown


def warn_unknown_environment(*models: type[BaseSettings]) -> None:
    for name in unknown_environment(models):
        log.warning("environment variable %s names no setting of this process: ignored", name)


def _merge(
    into: dict[str, Any], values: Mapping[str, Any], sources: dict[str, Source], source: Source, prefix: str
) -> None:
    for name, value in values.items():
        dotted = f"{prefix}{name}"
        current = into.get(name)
        if isinstance(value, Mapping) and isinstance(current, dict):
            _merge(current, value, sources, source, prefix=f"{dotted}.")
            continue
        into[name] = dict(value) if isinstance(value, Mapping) else value
        for key in [key for key in sources if key.startswith(f"{dotted}.")]:
            del sources[key]  # a whole table replaced: its keys' earlier sources no longer apply
        if isinstance(value, Mapping):
            for key in _leaf_names(value, prefix=f"{dotted}."):
                sources[key] = source
        else:
            sources[dotted] = source


def _leaf_names(values: Mapping[str, Any], prefix: str) -> list[str]:
    names: list[str] = []
    for name, value in values.items():
        if isinstance(value, Mapping):
            names += _leaf_names(value, prefix=f"{prefix}{name}.")
        else:
            names.append(f"{prefix}{name}")
    return names


def _check_keys(model: type[pydantic.BaseModel], values: Mapping[str, Any], path: Path, prefix: str) -> None:
    fields = model.model_fields
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"config file {path}: unknown setting {prefix}{name!s} (known: {known})")
        nested = field.annotation
        if isinstance(value, Mapping) and isinstance(nested, type) and issubclass(nested, pydantic.BaseModel):
            _check_keys(nested, value, path, prefix=f"{prefix}{name}.")


def _describe_sources(exc: pydantic.ValidationError, sources: dict[str, Source], path: Path | None) -> str:
    lines = []
    for error in exc.errors():
        dotted = ".".join(str(part) for part in error["loc"])
        source = sources.get(dotted)
        if source is Source.FILE:
            lines.append(f"\n  {dotted} comes from the config file {path}")
        elif source is Source.ENV:
            lines.append(f"\n  {dotted} comes from the environment ({_env_name(dotted)})")
        elif source is Source.FLAG:
            lines.append(f"\n  {dotted} comes from a command-line flag")
    return "".join(lines)


def _env_name(dotted: str) -> str:
    return ENV_PREFIX + dotted.replace(".", "__").upper()


# -- rendering (``magnetar config show``) -----------------------------------------------------------------


def settings_document(loaded: LoadedSettings[Any]) -> dict[str, Any]:
    """The effective settings as JSON-ready values (paths as text, unset values as ``None``)."""
    document: dict[str, Any] = json.loads(loaded.settings.model_dump_json())
    return document


def render_json(loaded: LoadedSettings[Any]) -> str:
    values = settings_document(loaded)
    sources = {name: _source_label(loaded, name) for name in _leaf_names(values, prefix="")}
    return json.dumps({"settings": values, "sources": sources}, indent=2, sort_keys=True)


def render_toml(loaded: LoadedSettings[Any]) -> str:
    """The effective settings as a TOML config file, each line commented with the source of its value."""
    values = settings_document(loaded)
    lines = [f"# effective {type(loaded.settings).__name__}: flags > environment > config file > defaults"]
    if loaded.config_file is not None:
        lines.append(f"# config file: {loaded.config_file}")
    tables = {name: value for name, value in values.items() if isinstance(value, dict)}
    for name, value in values.items():
        if name not in tables:
            lines.append(_toml_line(loaded, name, name, value))
    for table, table_values in tables.items():
        lines += ["", f"[{table}]"]
        for name, value in table_values.items():
            lines.append(_toml_line(loaded, name, f"{table}.{name}", value))
    return "\n".join(lines) + "\n"


def _source_label(loaded: LoadedSettings[Any], dotted: str) -> str:
    source = loaded.source_of(dotted)
    if source is Source.ENV:
        return f"env {_env_name(dotted)}"
    if source is Source.FILE:
        return f"file {loaded.config_file}"
    return source.value


def _toml_line(loaded: LoadedSettings[Any], key: str, dotted: str, value: Any) -> str:
    label = _source_label(loaded, dotted)
    if value is None:
        return f"# {key} is unset  # {label}"
    return f"{key} = {_toml_value(value)}  # {label}"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
