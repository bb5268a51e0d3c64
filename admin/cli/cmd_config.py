"""``magnetar config show bookie|broker|standalone|autorecovery [--config F] [--format toml|json]``.

Prints what the process would run with - the environment (``MAGNETAR_*``), the config file (``--config`` or
``MAGNETAR_CONFIG``) and the defaults merged as :mod:`magnetar.admin.processes.config` does - with where each
value came from. The TOML form is itself a valid config file. For ``standalone`` it shows its own settings,
then every setting of its broker (``[broker]``) and of its bookies (``[bookie]``, as bookie 0 runs them),
those the standalone sets itself commented out with what sets them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

KINDS = ("bookie", "broker", "standalone", "autorecovery")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print the effective settings of a process kind and their sources")
    show.add_argument("kind", choices=KINDS, help="process kind")
    show.add_argument("--config", help="TOML config file (default: $MAGNETAR_CONFIG)")
    show.add_argument("--format", choices=["toml", "json"], default="toml", help="output format")


def run(args: argparse.Namespace) -> int:
    import sys  # noqa: PLC0415

    from magnetar.admin.processes.config import (  # noqa: PLC0415
        ConfigError,
        config_file_from,
        load_settings,
        render_json,
        render_toml,
        unknown_environment,
    )

    model = settings_model(args.kind)
    try:
        loaded = load_settings(model, {}, config_file_from(args.config))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name in unknown_environment((model,)):
        print(f"warning: environment variable {name} names no {args.kind} setting: ignored", file=sys.stderr)
    for warning in loaded.ignored:
        print(f"warning: {warning}", file=sys.stderr)
    print(render_json(loaded) if args.format == "json" else render_toml(loaded), end="")
    return 0


def settings_model(kind: str) -> type[BaseSettings]:
    """The settings model of a process kind (imported on use)."""
    if kind == "bookie":
        from magnetar.admin.processes.autorecovery_wiring import BookieProcessSettings  # noqa: PLC0415

        return BookieProcessSettings
    if kind == "autorecovery":
        from magnetar.admin.processes.autorecovery_wiring import AutoRecoveryProcessSettings  # noqa: PLC0415

        return AutoRecoveryProcessSettings
    if kind == "broker":
        from magnetar.broker.settings import BrokerSettings  # noqa: PLC0415

        return BrokerSettings
    from magnetar.admin.processes.standalone_settings import StandaloneSettings  # noqa: PLC0415

    return StandaloneSettings
