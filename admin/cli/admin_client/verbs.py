"""How a ``magnetar admin`` verb is declared: a name, its arguments and an action over the client."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.admin.cli.admin_client.client import AdminClient
from magnetar.broker.wire import InvalidTopicNameError, NamespaceName, parse_topic_name

Action = Callable[[AdminClient, argparse.Namespace], Any]
Arguments = Callable[[argparse.ArgumentParser], object]


class UsageError(ValueError):
    """A bad argument value found after parsing (exit code 2, like argparse)."""


@dataclass(frozen=True, slots=True)
class Verb:
    name: str
    help: str
    action: Action
    arguments: Arguments = field(default=lambda parser: None)


def add_group(sub: Any, name: str, help_text: str, verbs: list[Verb]) -> None:
    group = sub.add_parser(name, help=help_text, description=help_text)
    verbs_sub = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in verbs:
        parser = verbs_sub.add_parser(verb.name, help=verb.help, description=verb.help)
        verb.arguments(parser)
        parser.set_defaults(action=verb.action)


def namespace_path(name: str) -> str:
    try:
        parsed = NamespaceName.parse(name)
    except InvalidTopicNameError as exc:
        raise UsageError(str(exc)) from None
    return f"/admin/v2/namespaces/{parsed}"


def topic_path(name: str) -> str:
    try:
        return f"/admin/v2/{parse_topic_name(name, allow_non_persistent=True).rest_path}"
    except InvalidTopicNameError as exc:
        raise UsageError(str(exc)) from None


def positional(name: str, help_text: str) -> Arguments:
    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(name, help=help_text)

    return add


def option(*flags: str, **kwargs: Any) -> Arguments:
    """One ``parser.add_argument(*flags, **kwargs)``, as an argument adder."""

    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*flags, **kwargs)

    return add


def combine(*adders: Arguments) -> Arguments:
    def add(parser: argparse.ArgumentParser) -> None:
        for adder in adders:
            adder(parser)

    return add


def force_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--force", action="store_true", help="force the operation")
