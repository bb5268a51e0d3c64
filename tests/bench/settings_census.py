"""Census of setting declarations: how many setting names are declared in more than one ``*Settings`` model.

A setting is *declared* by a model when the name is annotated in that class's own body (an inherited field is
not a second declaration; a field composed in as a nested model is not either). Run from the repository root::

    .venv/bin/python tests/bench/settings_census.py [--list]

It imports every module of the packages, collects the pydantic models whose class name ends in ``Settings``
(and the models of ours they inherit or nest) and prints the number of models, of declared fields, of distinct
names, and of names declared more than once
(with ``--list``, each such name and where it is declared).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from collections import defaultdict

import pydantic

PACKAGES = (
    "magnetar.admin",
    "magnetar.bookkeeper",
    "magnetar.broker",
    "magnetar.gc",
    "magnetar.managed_ledger",
)


def settings_models() -> list[type[pydantic.BaseModel]]:
    """Every ``*Settings`` pydantic model defined in the packages, and the models of ours they are built of
    (base classes and nested fields: ``HttpLimits``, ``SecurityLimits``); imports each module."""
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            if ".spark" in module.name or module.name.endswith("__main__"):
                continue  # optional dependency, or runs on import
            importlib.import_module(module.name)
    found: dict[str, type[pydantic.BaseModel]] = {}
    pending: list[type[pydantic.BaseModel]] = [pydantic.BaseModel]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            pending.append(sub)
            if sub.__module__.startswith("magnetar.") and sub.__name__.endswith("Settings"):
                found[f"{sub.__module__}.{sub.__qualname__}"] = sub
    parts = list(found.values())
    while parts:
        model = parts.pop()
        nested = [info.annotation for info in model.model_fields.values()]
        for cls in [*model.__mro__, *nested]:
            if (
                isinstance(cls, type)
                and issubclass(cls, pydantic.BaseModel)
                and cls.__module__.startswith("magnetar.")
                and f"{cls.__module__}.{cls.__qualname__}" not in found
            ):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
                parts.append(cls)
    return [found[key] for key in sorted(found)]


def declarations() -> dict[str, list[str]]:
    """Setting name -> the models (``module.Class``) that declare it in their own body."""
    where: dict[str, list[str]] = defaultdict(list)
    for model in settings_models():
        own = inspect.get_annotations(model)
        for name in own:
            if name in model.model_fields:
                where[name].append(f"{model.__module__}.{model.__qualname__}")
    return where


def main(argv: list[str]) -> int:
    where = declarations()
    models = {model for places in where.values() for model in places}
    fields = sum(len(places) for places in where.values())
    repeated = {name: places for name, places in where.items() if len(places) > 1}
    print(f"models={len(models)} fields={fields} names={len(where)} declared_more_than_once={len(repeated)}")
    if "--list" in argv:
        for name in sorted(repeated, key=lambda n: (-len(repeated[n]), n)):
            print(f"{len(repeated[name])} {name}: {', '.join(repeated[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
