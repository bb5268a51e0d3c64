"""What every long-running ``magnetar`` process shares: the ready line, error summaries, signals, GC tuning.

A process that serves announces readiness with one JSON line on stdout (``{"event": "<kind>-ready", ...}``)
and, when asked, writes the same document atomically to a port file, so tests, scripts and the dev cluster
find a ``--port 0`` process. Logs go to stderr.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from magnetar.bookkeeper.metadata import MetadataStoreError, StoreUnavailableError
from magnetar.bookkeeper.runtime import ListenError

EXIT_FAILED = 1
EXIT_USAGE = 2

GC_THRESHOLDS = (50_000, 50, 100)
"""Generation-0 threshold raised from 700 (fewer collections of short-lived garbage, which reference counting
frees anyway); older generations collected less often."""

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What stops a process gracefully: a service manager's SIGTERM, Ctrl-C, and the hang-up of the terminal or
SSH session it runs in (left at its default, SIGHUP would kill the process on the spot - and leave a dev
cluster's children, which run in their own session, behind)."""


def announce(document: dict[str, Any], port_file: Path | None = None) -> None:
    """Print the ready line on stdout and write it to ``port_file`` (atomically) if given."""
    text = json.dumps(document)
    if port_file is not None:
        temporary = port_file.with_name(port_file.name + ".tmp")
        temporary.write_text(text + "\n")
        os.replace(temporary, port_file)
    print(text, flush=True)


def describe(exc: BaseException) -> str:
    """A one-line summary of an exception (or of every leaf of an exception group)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


FLAG_NAMES = {"bind_address": "--bind"}
"""Settings whose flag is not ``--`` and the setting's name with dashes."""

Hints = Mapping[type[BaseException], str]
"""What a user can do about a failure of a given type, in a given process kind (first match wins)."""

METADATA_HINTS: Hints = {
    StoreUnavailableError: "check the metadata store URL (--metadata-url or MAGNETAR_METADATA_URL)",
    MetadataStoreError: "the metadata store is set with --metadata-url or MAGNETAR_METADATA_URL",
}
"""The hints of a process that opens the metadata store its ``metadata_url`` names (broker, bookie)."""


def setting_hint(setting: str) -> str:
    """How a user sets ``setting``: its flag and its environment variable."""
    flag = FLAG_NAMES.get(setting, "--" + setting.replace("_", "-"))
    return f"{flag} or MAGNETAR_{setting.upper()}"


def explain(exc: BaseException, hints: Hints | None = None) -> str:
    """Why a process failed, in one line: each failure (every leaf of a group) with what to do about it.

    A :class:`ListenError` names the setting to change; an exception of a type in ``hints`` gets that
    hint; anything else is summarized as :func:`describe` does."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(explain(inner, hints) for inner in exc.exceptions)
    if isinstance(exc, ListenError):
        if exc.setting == "bind_address":
            return f"{exc}; set another address with {setting_hint(exc.setting)}"
        return f"{exc}; stop that process, or choose another port with {setting_hint(exc.setting)}"
    for kind, hint in (hints or {}).items():
        if isinstance(exc, kind):
            return f"{exc}; {hint}"
    return describe(exc)


async def first_signal(signals: AsyncIterator[int], log: logging.Logger) -> None:
    """Wait for one of :data:`STOP_SIGNALS` (from ``trio.open_signal_receiver``) and log it."""
    async for signum in signals:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        return


def tune_gc() -> None:
    """Freeze what start-up allocated (never scanned again) and raise the collection thresholds."""
    # The stdlib module (a builtin, always found first at run time); mypy would resolve ``import gc`` to
    # Magnetar's own top-level gc/ folder.
    collector: Any = importlib.import_module("gc")
    collector.collect()
    collector.freeze()
    collector.set_threshold(*GC_THRESHOLDS)
