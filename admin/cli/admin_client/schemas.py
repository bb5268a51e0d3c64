"""``magnetar admin schemas get|upload|delete|compatibility``: a topic's schema through the admin REST API
(Pulsar's ``pulsar-admin schemas``). ``upload`` and ``compatibility`` read a ``PostSchemaPayload`` file,
``{"type": "AVRO", "schema": "<definition>", "properties": {}}``, as ``pulsar-admin schemas upload -f``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from magnetar.admin.cli.admin_client.client import AdminClient
from magnetar.admin.cli.admin_client.verbs import UsageError, Verb, combine, force_flag, option, positional
from magnetar.broker.wire import InvalidTopicNameError, parse_topic_name

PAYLOAD_FILE_BYTES_MAX = 2 * 1024 * 1024
"""Largest schema payload file read (the broker bounds the schema itself)."""


def _path(args: argparse.Namespace, suffix: str) -> str:
    try:
        topic = parse_topic_name(args.topic)
    except InvalidTopicNameError as exc:
        raise UsageError(str(exc)) from None
    return f"/admin/v2/schemas/{topic.tenant}/{topic.namespace}/{topic.encoded_local_name}{suffix}"


def _payload(args: argparse.Namespace) -> Any:
    path = Path(args.filename)
    try:
        if path.stat().st_size > PAYLOAD_FILE_BYTES_MAX:
            raise UsageError(f"{path}: larger than {PAYLOAD_FILE_BYTES_MAX} bytes")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: {exc}") from None


def _get(c: AdminClient, a: argparse.Namespace) -> Any:
    if a.version is not None:
        return c.get(_path(a, f"/schema/{a.version}"))
    return c.get(_path(a, "/schema"))


_TOPIC = positional("topic", "persistent://tenant/namespace/topic")
_FILE = option("-f", "--filename", required=True, help="a JSON PostSchemaPayload file")

SCHEMAS = [
    Verb("get", "the topic's latest schema, or one version", _get,
         combine(_TOPIC, option("--version", type=int, help="a version number"))),
    Verb("upload", "add a schema version to the topic", lambda c, a: c.post(_path(a, "/schema"), _payload(a)),
         combine(_TOPIC, _FILE)),
    Verb("delete", "delete the topic's schema (a deletion mark; --force: the whole history)",
         lambda c, a: c.delete(_path(a, "/schema"), force=str(a.force).lower()), combine(_TOPIC, force_flag)),
    Verb("compatibility", "test a schema's compatibility with the topic's",
         lambda c, a: c.post(_path(a, "/compatibility"), _payload(a)), combine(_TOPIC, _FILE)),
]  # fmt: skip
