"""Settings composed of layers' models and still reached by their flat names.

A process's settings model holds each layer's settings model whole, as a nested field (the broker's ``http:
HttpSettings``), so each setting is declared once, in its layer, with its unit, bounds and documentation. A
model names the nested fields whose settings are also reached flat in its ``FLATTENED`` class variable; a
setting of such a layer is then given by its own name at the top level exactly as before it was composed
(``ws_frame_bytes_max = 1048576`` in a config file, ``MAGNETAR_WS_FRAME_BYTES_MAX``, a keyword argument), or
in the layer's table (``[http]``, ``MAGNETAR_HTTP__WS_FRAME_BYTES_MAX``), which wins over the flat name.

:func:`nest_flat` moves flat names into their tables; the model runs it before validation (so constructing it
from flat values works) and the process's config loader runs it on each source (so ``magnetar config show``
names the source of each value under its nested name).

A setting whose name meant something else than a setting of the same name elsewhere is renamed, and its
model keeps the old name working in its ``RENAMED`` class variable (old name -> new name; :func:`rename_old`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def renamed(model: type[BaseModel]) -> dict[str, str]:
    """Old name -> new name of the settings ``model`` renamed (its ``RENAMED`` class variable): the old name
    still sets the new one, in every source, unless the new one is given too."""
    names = getattr(model, "RENAMED", {})
    return dict(names) if isinstance(names, Mapping) else {}


def rename_old(model: type[BaseModel], values: Any) -> Any:
    """``values`` with the old names of ``model``'s renamed settings replaced by the new ones."""
    old_names = renamed(model)
    if not isinstance(values, Mapping) or not any(name in values for name in old_names):
        return values
    updated = {name: value for name, value in values.items() if name not in old_names}
    for old, new in old_names.items():
        if old in values:
            updated.setdefault(new, values[old])
    return updated


def flattened(model: type[BaseModel]) -> tuple[str, ...]:
    """The nested fields of ``model`` whose settings are reached by their flat names too."""
    names = getattr(model, "FLATTENED", ())
    return tuple(names) if isinstance(names, tuple) else ()


def nested_model(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    """The model of ``model``'s field ``field`` when it is a nested settings model."""
    info = model.model_fields.get(field)
    annotation = info.annotation if info is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def flat_names(model: type[BaseModel]) -> dict[str, str]:
    """Flat setting name -> the nested field of ``model`` that declares it (a name ``model`` declares itself
    stays its own; the first nested field declaring a name holds it)."""
    names: dict[str, str] = {}
    for field in flattened(model):
        layer = nested_model(model, field)
        for name in layer.model_fields if layer is not None else ():
            if name not in model.model_fields:
                names.setdefault(name, field)
    return names


def nest_flat(model: type[BaseModel], values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``values`` with each flat name of a layer moved into that layer's table (a key the table already has
    wins), and the dotted name of each moved value -> the flat name it was given under."""
    where = flat_names(model)
    nested: dict[str, Any] = {}
    moved: dict[str, str] = {}
    for name, value in values.items():
        if name not in where:
            nested[name] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
    for name, value in values.items():
        field = where.get(name)
        if field is None:
            continue
        table = nested.setdefault(field, {})
        if isinstance(table, BaseModel):  # a layer's model given whole: its values, plus the flat ones
            table = nested[field] = table.model_dump()
        if not isinstance(table, dict):
            continue  # not a table: validation says so
        if name not in table:
            table[name] = value
            moved[f"{field}.{name}"] = name
    return nested, moved
