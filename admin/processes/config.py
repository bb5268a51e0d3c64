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

A process made of other processes (``magnetar standalone``: a broker and bookies) declares its
:class:`Parts`: fields holding the whole settings model of each part (``broker: BrokerSettings``,
``bookie: BookieSettings``). Each part's settings are then reached two ways, in every source:

* by their own names, flat, as in the part's own config file and environment (``retention_check_interval_s
  = 10``, ``MAGNETAR_RETENTION_CHECK_INTERVAL_S``, a ``[storage_engine]`` table): a flat name reaches every
  part that has a setting of that name (``authentication_enabled`` reaches the broker and the bookies);
* in the part's table (``[broker]``, ``[bookie.gc]``; ``MAGNETAR_BROKER__<NAME>``,
  ``MAGNETAR_BOOKIE__GC__<NAME>``), which reaches that part only and wins over a flat name of the same source.

A name of the process's own (``http_port``, ``data_dir``) stays its own; the settings of a part that the
process sets itself (a bookie's ``port``, the broker's ``metadata_url``) are refused in a file or a table
(an error naming what to set instead) and ignored with a warning when they come flat from the environment,
which other programs share. The process's own defaults for its parts' settings (``Parts.defaults``) come
below every source; ``magnetar config show`` labels them ``<kind> default``.
"""

from __future__ import annotations

import copy
import enum
import json
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import pydantic
from pydantic_settings import BaseSettings, EnvSettingsSource

from magnetar.bookkeeper.runtime import LOOP_MONITOR_ENV, flat_names, nest_flat, nested_model
from magnetar.bookkeeper.runtime import renamed as renamed_settings

log = logging.getLogger(__name__)

S = TypeVar("S", bound=BaseSettings)

ENV_PREFIX = "MAGNETAR_"
CONFIG_ENV = "MAGNETAR_CONFIG"
"""Environment variable naming the config file when ``--config`` is not given."""
PROCESS_ENV = frozenset({CONFIG_ENV, "MAGNETAR_LOG_LEVEL", LOOP_MONITOR_ENV})
"""``MAGNETAR_*`` variables read by the command line itself rather than by a settings model."""


class Source(enum.StrEnum):
    FLAG = "flag"
    ENV = "env"
    FILE = "file"
    DEFAULT = "default"

    PART_DEFAULT = "process default"
    """The composite process's own default for a setting of one of its parts (:attr:`Parts.defaults`)."""


class ConfigError(ValueError):
    """A config file that cannot be read, or settings that do not validate; the message says which."""


@dataclass(frozen=True, slots=True)
class Parts:
    """How a composite process's settings model holds the settings of its parts (see the module)."""

    kind: str
    """The process kind, for messages and labels (``standalone``)."""
    models: Mapping[str, type[BaseSettings]]
    """Field name -> the part's settings model (``{"broker": BrokerSettings, "bookie": BookieSettings}``)."""
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Field name -> the process's own defaults for that part's settings (nested like a config table)."""
    set_by_process: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Field name -> the part's settings the process sets itself -> what it sets them to, in words."""

    def reached_by(self, name: str) -> list[str]:
        """The parts a flat setting ``name`` reaches (those that have it and do not have it set for them)."""
        return [
            part
            for part, model in self.models.items()
            if _declares(model, name) and name not in self.set_by_process.get(part, {})
        ]

    def set_for(self, name: str) -> str | None:
        """Why a flat ``name`` reaches no part although some part has it (None when it is unknown)."""
        for part in self.models:
            why = self.set_by_process.get(part, {}).get(name)
            if why is not None:
                return why
        return None


def parts_of(model: type[BaseSettings]) -> Parts | None:
    """The :class:`Parts` a settings model declares as its ``PARTS`` class variable, if any."""
    parts = getattr(model, "PARTS", None)
    return parts if isinstance(parts, Parts) else None


@dataclass(frozen=True, slots=True)
class LoadedSettings(Generic[S]):
    settings: S
    sources: dict[str, Source]
    """Dotted setting name (``storage_engine.journal_group_wait_ms``) -> the source that gave its value;
    settings not listed have their default."""
    config_file: Path | None = None
    given_as: dict[str, str] = field(default_factory=dict)
    """Dotted name of a part's setting -> the flat name it was given under (``broker.cluster`` ->
    ``cluster``), for the settings that reached a part by their flat name."""
    ignored: tuple[str, ...] = ()
    """Warnings about environment variables the process ignored (settings it sets itself)."""

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
    parts = parts_of(model)
    file_values = read_config_file(model, config_file) if config_file is not None else {}
    env_values = environment_values(model)
    flag_values = {name: value for name, value in overrides.items() if value is not None}
    layers: list[tuple[Mapping[str, Any], Source]] = [
        (file_values, Source.FILE),
        (env_values, Source.ENV),
        (flag_values, Source.FLAG),
    ]
    merged: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    given_as: dict[str, str] = {}
    ignored: list[str] = []
    if parts is not None:
        _merge(merged, parts.defaults, sources, Source.PART_DEFAULT, prefix="")
    for given, source in layers:
        renamed: dict[str, str] = {}
        where = f"config file {config_file}" if source is Source.FILE else source.value
        values = _lift(model, parts, given, source, where, renamed, ignored) if parts is not None else given
        values = _nest_layers(model, parts, values, renamed)
        _merge(merged, values, sources, source, prefix="", renamed=renamed, given_as=given_as)
    try:
        settings = model.model_validate(merged)
    except pydantic.ValidationError as exc:
        where = _describe_sources(exc, sources, config_file, given_as)
        raise ConfigError(f"invalid {model.__name__}: {exc}{where}") from None
    return LoadedSettings(settings, sources, config_file, given_as, tuple(ignored))


def _lift(
    model: type[BaseSettings],
    parts: Parts,
    values: Mapping[str, Any],
    source: Source,
    where: str,
    renamed: dict[str, str],
    ignored: list[str],
) -> dict[str, Any]:
    """``values`` with every flat setting of a part moved into that part's table (see the module).

    ``renamed`` receives ``part.name`` -> ``name`` for each moved setting. A setting the process sets itself
    is an error when it comes from a file, a flag or a part's table, and a warning (in ``ignored``) when it
    comes flat from the environment.
    """
    lifted: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if name in parts.models:
            if isinstance(value, Mapping):
                _refuse_set_by_process(parts, name, value, where)
                tables[name] = copy.deepcopy(dict(value))
            else:
                lifted[name] = value  # not a table: validation says so
        elif name in model.model_fields:
            lifted[name] = value
    for name, value in values.items():
        if name in parts.models or name in model.model_fields:
            continue
        targets = parts.reached_by(name)
        if not targets:
            why = parts.set_for(name)
            if why is None:  # only a file or a flag can name an unknown setting; keep it for validation
                lifted[name] = value
            elif source is Source.ENV:
                ignored.append(f"{_env_name(name)} is ignored: the {parts.kind} sets {name} itself: {why}")
            else:
                raise ConfigError(f"{name} ({where}): the {parts.kind} sets it itself: {why}")
            continue
        for part in targets:  # a part's own table wins over the flat name in the same source, key by key
            _fill(tables.setdefault(part, {}), {name: value}, part, "", renamed)
    lifted.update(tables)
    return lifted


def _declares(model: type[pydantic.BaseModel], name: str) -> bool:
    """``model`` has a setting ``name``: its own, or a composed layer's reached by its flat name."""
    return name in model.model_fields or name in flat_names(model)


def _nest_layers(
    model: type[BaseSettings], parts: Parts | None, values: Mapping[str, Any], renamed: dict[str, str]
) -> dict[str, Any]:
    """``values`` with the flat names of composed layers (:mod:`~magnetar.bookkeeper.runtime.flat_settings`)
    moved into their tables, in the process's model and in each part's table; ``renamed`` receives the
    dotted name of each moved value -> the flat name it was given under."""
    nested, moved = nest_flat(model, values)
    renamed.update(moved)
    for part, part_model in (parts.models if parts is not None else {}).items():
        table = nested.get(part)
        if not isinstance(table, Mapping):
            continue
        nested[part], moved = nest_flat(part_model, table)
        for dotted, flat in moved.items():
            renamed[f"{part}.{dotted}"] = renamed.pop(f"{part}.{flat}", f"{part}.{flat}")
    return _new_names(model, nested, "", renamed)


def _new_names(
    model: type[pydantic.BaseModel], values: dict[str, Any], prefix: str, renamed: dict[str, str]
) -> dict[str, Any]:
    """``values`` with the old names of renamed settings (a model's ``RENAMED``) replaced by the new ones, in
    nested tables too; ``renamed`` receives each new dotted name -> the name it was given under."""
    old_names = renamed_settings(model)
    for old, new in old_names.items():
        if old in values:
            value = values.pop(old)
            if new not in values:
                values[new] = value
                renamed[f"{prefix}{new}"] = renamed.pop(f"{prefix}{old}", f"{prefix}{old}")
    for name, value in values.items():
        layer = nested_model(model, name)
        if layer is not None and isinstance(value, dict):
            values[name] = _new_names(layer, value, f"{prefix}{name}.", renamed)
    return values


def _fill(
    into: dict[str, Any], flat: Mapping[str, Any], dotted: str, given: str, renamed: dict[str, str]
) -> None:
    """Add to ``into`` (a part's table, at ``dotted``) what ``flat`` (given under the names ``given``...)
    has and it has not, recording each added value's flat name in ``renamed``."""
    for name, value in flat.items():
        here, flat_name = f"{dotted}.{name}", f"{given}{name}"
        current = into.get(name)
        if current is None and name not in into:
            into[name] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
            renamed[here] = flat_name
        elif isinstance(current, dict) and isinstance(value, Mapping):
            _fill(current, value, here, f"{flat_name}.", renamed)


def _refuse_set_by_process(parts: Parts, part: str, table: Mapping[str, Any], where: str) -> None:
    for name in table:
        why = parts.set_by_process.get(part, {}).get(name)
        if why is not None:
            raise ConfigError(f"{part}.{name} ({where}): the {parts.kind} sets it itself: {why}")


def read_config_file(model: type[BaseSettings], path: Path) -> dict[str, Any]:
    """The file's values, checked to name only settings of ``model`` (nested tables included) or, for a
    composite process, flat settings of its parts."""
    try:
        with path.open("rb") as file:
            values = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    parts = parts_of(model)
    if parts is None:
        _check_keys(model, values, path, prefix="")
        return values
    own = {name: value for name, value in values.items() if name in model.model_fields}
    _check_keys(model, own, path, prefix="")
    for name, value in values.items():
        if name in own:
            continue
        part_models = [parts.models[part] for part in parts.models if _declares(parts.models[part], name)]
        if not part_models:
            raise ConfigError(
                f"config file {path}: unknown setting {name!s} (not a setting of the {parts.kind}, nor of "
                f"its {' or '.join(parts.models)}; `magnetar config show {parts.kind}` lists them)"
            )
        for part_model in part_models:
            _check_keys(part_model, {name: value}, path, prefix="")
    return values


def environment_values(model: type[BaseSettings]) -> dict[str, Any]:
    """What the environment sets for ``model`` (pydantic-settings' own parsing: prefix, nesting, JSON), and
    for a composite process also the flat settings of its parts."""
    values: dict[str, Any] = {}
    parts = parts_of(model)
    for part_model in parts.models.values() if parts is not None else ():
        values.update(_flat_environment(part_model))
        values.update(EnvSettingsSource(part_model)())
    values.update(_flat_environment(model))
    values.update(EnvSettingsSource(model)())
    return values


def _flat_environment(model: type[BaseSettings], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``MAGNETAR_<NAME>`` variables naming a composed layer's setting by its flat name (the text as given;
    validation converts it)."""
    environ = os.environ if environ is None else environ
    flat = {ENV_PREFIX + name.upper(): name for name in flat_names(model)}
    return {flat[key.upper()]: value for key, value in environ.items() if key.upper() in flat}


def environment_models(model: type[BaseSettings]) -> tuple[type[BaseSettings], ...]:
    """The models whose ``MAGNETAR_*`` variables a process of this kind reads: its own and its parts'."""
    parts = parts_of(model)
    return (model, *(parts.models.values() if parts is not None else ()))


def unknown_environment(
    models: tuple[type[BaseSettings], ...], environ: Mapping[str, str] | None = None
) -> list[str]:
    """``MAGNETAR_*`` variables that name no setting of any of ``models`` (nor a process variable)."""
    environ = os.environ if environ is None else environ
    every = [each for model in models for each in environment_models(model)]
    names = [name for model in every for name in [*model.model_fields, *flat_names(model)]]
    known = {ENV_PREFIX + name.upper() for name in names}
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
    into: dict[str, Any],
    values: Mapping[str, Any],
    sources: dict[str, Source],
    source: Source,
    prefix: str,
    renamed: Mapping[str, str] | None = None,
    given_as: dict[str, str] | None = None,
) -> None:
    """Merge ``values`` into ``into`` key by key, recording each leaf's source (and in ``given_as`` the flat
    name of the leaves ``renamed`` says were lifted into a part)."""
    renamed = renamed or {}
    given_as = {} if given_as is None else given_as
    for name, value in values.items():
        dotted = f"{prefix}{name}"
        current = into.get(name)
        if isinstance(value, Mapping) and isinstance(current, dict):
            _merge(current, value, sources, source, f"{dotted}.", renamed, given_as)
            continue
        into[name] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
        for key in [key for key in sources if key == dotted or key.startswith(f"{dotted}.")]:
            del sources[key]  # a whole table replaced: its keys' earlier sources no longer apply
            given_as.pop(key, None)
        leaves = _leaf_names(value, prefix=f"{dotted}.") if isinstance(value, Mapping) else [dotted]
        for key in leaves:
            sources[key] = source
            flat = _given_name(key, renamed)
            if flat is not None:
                given_as[key] = flat


def _given_name(dotted: str, renamed: Mapping[str, str]) -> str | None:
    """The flat name of a lifted leaf: ``bookie.gc.gc_wait_time_s`` -> ``gc.gc_wait_time_s``."""
    head = dotted
    while True:
        if head in renamed:
            return renamed[head] + dotted[len(head) :]
        if "." not in head:
            return None
        head = head.rsplit(".", 1)[0]


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
        field = fields.get(renamed_settings(model).get(name, name))
        layer = flat_names(model).get(name)
        if field is None and layer is not None:
            layer_model = nested_model(model, layer)
            if layer_model is not None:
                _check_keys(layer_model, {name: value}, path, prefix=f"{prefix}")
            continue
        if field is None:
            known = ", ".join(sorted([*fields, *flat_names(model)]))
            raise ConfigError(f"config file {path}: unknown setting {prefix}{name!s} (known: {known})")
        nested = field.annotation
        if isinstance(value, Mapping) and isinstance(nested, type) and issubclass(nested, pydantic.BaseModel):
            _check_keys(nested, value, path, prefix=f"{prefix}{name}.")


def _describe_sources(
    exc: pydantic.ValidationError, sources: dict[str, Source], path: Path | None, given_as: dict[str, str]
) -> str:
    lines = []
    for error in exc.errors():
        dotted = ".".join(str(part) for part in error["loc"])
        source = sources.get(dotted)
        named = given_as.get(dotted, dotted)
        if source is Source.FILE:
            alias = f" (as {named})" if named != dotted else ""
            lines.append(f"\n  {dotted} comes from the config file {path}{alias}")
        elif source is Source.ENV:
            lines.append(f"\n  {dotted} comes from the environment ({_env_name(named)})")
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
    """The effective settings as a TOML config file, each line commented with the source of its value.

    Settings of a part that the process sets itself are shown commented out (they are not settable)."""
    values = settings_document(loaded)
    lines = [f"# effective {type(loaded.settings).__name__}: flags > environment > config file > defaults"]
    if loaded.config_file is not None:
        lines.append(f"# config file: {loaded.config_file}")
    _toml_table(loaded, values, "", lines)
    return "\n".join(lines) + "\n"


def _toml_table(
    loaded: LoadedSettings[Any], values: Mapping[str, Any], prefix: str, lines: list[str]
) -> None:
    tables = {name: value for name, value in values.items() if isinstance(value, dict)}
    for name, value in values.items():
        if name not in tables:
            lines.append(_toml_line(loaded, name, f"{prefix}{name}", value))
    for name, table in tables.items():
        lines += ["", f"[{prefix}{name}]"]
        _toml_table(loaded, table, f"{prefix}{name}.", lines)


def _set_by_process(loaded: LoadedSettings[Any], dotted: str) -> str | None:
    parts = parts_of(type(loaded.settings))
    if parts is None or "." not in dotted:
        return None
    part, name = dotted.split(".", 1)
    return parts.set_by_process.get(part, {}).get(name)


def _source_label(loaded: LoadedSettings[Any], dotted: str) -> str:
    why = _set_by_process(loaded, dotted)
    parts = parts_of(type(loaded.settings))
    if why is not None and parts is not None:
        return f"set by the {parts.kind}: {why}"
    source = loaded.source_of(dotted)
    if source is Source.ENV:
        return f"env {_env_name(loaded.given_as.get(dotted, dotted))}"
    if source is Source.FILE:
        return f"file {loaded.config_file}"
    if source is Source.PART_DEFAULT and parts is not None:
        return f"{parts.kind} default"
    return source.value


def _toml_line(loaded: LoadedSettings[Any], key: str, dotted: str, value: Any) -> str:
    label = _source_label(loaded, dotted)
    if value is None:
        return f"# {key} is unset  # {label}"
    if _set_by_process(loaded, dotted) is not None:
        return f"# {key} = {_toml_value(value)}  # {label}"
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
