"""Census of setting declarations: how many setting names are declared in more than one ``*Settings`` model.

A setting is *declared* by a model when the name is annotated in that class's own body (an inherited field is
not a second declaration; a field composed in as a nested model is not either). Run from the repository root::

    .venv/bin/python tests/bench/settings_census.py [--list]

It imports every module of the packages, collects the pydantic models whose class name ends in ``Settings``
(and the models of ours they inherit or nest) and prints the number of models, of declared fields, of distinct
names, and of names declared more than once
(with ``--list``, each such name, where it is declared and why it stays: :data:`REPEATS_KEPT`). It exits 1
when a name is repeated without a reason in :data:`REPEATS_KEPT`, or a reason names one no longer repeated.
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


REPEATS_KEPT: dict[str, str] = {
    "bind_address": "a bookie and AutoRecovery (BookKeeperServiceSettings) listen on every interface by "
    "default, as servers of the cluster; a broker and the standalone (HttpListenSettings) on loopback",
    "http_port": "a broker's and the standalone's HTTP server is their API (default 8080); a bookie's and "
    "AutoRecovery's serves optional endpoints (unset: no HTTP)",
    "metadata_url": "the metadata commands (MetadataClientSettings) have no default store: not given is an "
    "error; the processes default to memory://",
    "cluster": "wait-for-metadata's cluster is optional (unset: do not wait for one); a broker's is its own "
    "cluster (default standalone)",
    "data_dir": "the standalone's holds everything (its metadata, and bookie-<i> for each bookie); a "
    "bookie's is that bookie's ledgers volume",
    "ensemble_size": "the standalone's is optional (unset: from its number of bookies) and sets its broker's",
    "write_quorum": "the standalone's is optional (unset: from its number of bookies) and sets its broker's",
    "ack_quorum": "the standalone's is optional (unset: from its number of bookies) and sets its broker's",
    "frame_bytes_max": "each side's bound on the frames it receives on a bookie connection: a bookie "
    "server's (a process setting) and the client transport's (set by code, no flag or variable)",
    "inflight_requests_max": "each side's bound on one bookie connection's requests in flight: a bookie "
    "server's (a process setting) and the client transport's (set by code)",
    "receive_chunk_bytes": "each side's socket read size on a bookie connection: a bookie server's (a "
    "process setting) and the client transport's (set by code)",
    "pending_adds_max": "two queues in series: the managed ledger's adds waiting for a ledger or in flight "
    "(the broker's flat name), and the client's adds in flight on one ledger handle ([client] table)",
}
"""Names still declared in two models, each with why the pair stays (a different default the process
depends on, or one limit per side of a connection); ``--list`` prints the reason."""


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
    unexplained = sorted(name for name in repeated if name not in REPEATS_KEPT)
    print(
        f"models={len(models)} fields={fields} names={len(where)} declared_more_than_once={len(repeated)} "
        f"without_a_reason={len(unexplained)}"
    )
    if "--list" in argv:
        for name in sorted(repeated, key=lambda n: (-len(repeated[n]), n)):
            reason = REPEATS_KEPT.get(name, "NO REASON GIVEN")
            print(f"{len(repeated[name])} {name}: {', '.join(repeated[name])}\n    kept: {reason}")
    stale = sorted(name for name in REPEATS_KEPT if name not in repeated)
    if stale:
        print(f"reasons for names no longer repeated (remove them): {', '.join(stale)}")
    return 1 if unexplained or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
