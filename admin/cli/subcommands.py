"""Subcommands whose arguments are added only when that subcommand is chosen.

``magnetar`` has one subcommand per process kind or tool, and some of them (``perf``) have subcommands of
their own. Each lives in a module that imports what it needs - trio, the broker, the storage engine,
httpx - and adding a subcommand's arguments means importing its module. Importing all of them to build one
parser would make ``magnetar --help`` slow, and an import that fails in one command (a missing optional
package) would break every other command.

:class:`LazySubcommands` is an argparse subparsers action that knows, for each subcommand, its help line and
a loader that adds its arguments. The parser of every subcommand exists from the start (so ``--help`` lists
them all with their help lines), but a subcommand's loader runs only when the command line chooses it, just
before argparse parses the rest of the line with that parser. ``magnetar broker --help`` thus imports the
broker's flags and nothing of ``admin`` or ``perf``. :func:`load_every_subcommand` runs every loader of a
parser tree (tests that inspect every option use it).

Use it with ``parser.add_subparsers(action=LazySubcommands, ...)`` and :meth:`LazySubcommands.add_lazy`.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

Loader = Callable[[argparse.ArgumentParser], None]

if TYPE_CHECKING:  # generic in the type stubs only
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class LazySubcommands(_SubParsers):
    """A subparsers action whose subcommands add their arguments when chosen (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaders: dict[str, tuple[argparse.ArgumentParser, Loader]] = {}

    def add_lazy(
        self, name: str, help_text: str, loader: Loader, **parser_options: Any
    ) -> argparse.ArgumentParser:
        """A subcommand ``name`` with its help line; ``loader(parser)`` adds its arguments once chosen.
        ``parser_options`` go to the subcommand's parser (``formatter_class``, say)."""
        parser = self.add_parser(name, help=help_text, description=help_text, **parser_options)
        self._loaders[name] = (parser, loader)
        return parser

    def add_module(
        self, name: str, help_text: str, module_name: str, **parser_options: Any
    ) -> argparse.ArgumentParser:
        """A subcommand whose module (imported when chosen) has ``add_arguments(parser)``."""

        def load(parser: argparse.ArgumentParser) -> None:
            importlib.import_module(module_name).add_arguments(parser)

        return self.add_lazy(name, help_text, load, **parser_options)

    def load(self, name: str) -> argparse.ArgumentParser | None:
        """Run the loader of ``name`` (once); its parser, or None when ``name`` is not a lazy subcommand."""
        entry = self._loaders.pop(name, None)
        if entry is None:
            return None
        parser, loader = entry
        loader(parser)
        return parser

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, Sequence) and values and isinstance(values[0], str):
            self.load(values[0])
        super().__call__(parser, namespace, values, option_string)


def load_every_subcommand(parser: argparse.ArgumentParser) -> None:
    """Run every loader in the tree below ``parser``, so that every subcommand has all its arguments."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        if isinstance(action, LazySubcommands):
            for name in list(action._loaders):
                action.load(name)
        for child in dict.fromkeys(action.choices.values()):
            load_every_subcommand(child)
