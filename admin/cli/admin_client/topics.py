"""``magnetar admin topics|subscriptions``: pulsar-admin's topic and subscription verbs and flags."""

from __future__ import annotations

import argparse
import datetime
import time
from typing import Any
from urllib.parse import quote

from magnetar.admin.cli.admin_client.client import AdminApiError, AdminClient
from magnetar.admin.cli.admin_client.messages import (
    PAYLOAD_FORMATS,
    AdminMessage,
    MessageFormatError,
    parse_message_response,
    views,
)
from magnetar.admin.cli.admin_client.tenancy import QUOTA_TYPES, quota_body, quota_flags, retention_flags
from magnetar.admin.cli.admin_client.units import UnitError, parse_time_s, retention_body
from magnetar.admin.cli.admin_client.verbs import (
    UsageError,
    Verb,
    combine,
    force_flag,
    namespace_path,
    option,
    positional,
    topic_path,
)

A = argparse.Namespace
C = AdminClient
TOPIC = positional("topic", "persistent://tenant/namespace/topic (or a short name)")
PEEK_MESSAGES_MAX = 1000


def _ns_topics(args: A, tail: str = "") -> str:
    return namespace_path(args.namespace).replace("/namespaces/", "/persistent/", 1) + tail


def _list_topics(client: C, args: A) -> list[str]:
    """pulsar-admin's ``topics list``: both domains, as the Java client's ``getList`` merges them."""
    persistent = client.get(_ns_topics(args))
    non_persistent = client.get(_ns_topics(args).replace("/persistent/", "/non-persistent/", 1))
    return [*persistent, *non_persistent]


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _t(args: A, tail: str = "") -> str:
    return topic_path(args.topic) + tail


def _sub(args: A, tail: str = "") -> str:
    return _t(args, f"/subscription/{quote(args.subscription, safe='')}{tail}")


def _position(text: str) -> dict[str, int]:
    ledger, sep, entry = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return {"ledgerId": int(ledger), "entryId": int(entry.split(":")[0])}
    except ValueError:
        raise UsageError(f"invalid message id {text!r}: expected ledgerId:entryId") from None


def _properties(pairs: str | None) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs.split(","):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"invalid property {pair!r}: expected key=value")
        out[key] = value
    return out


def _seconds(text: str) -> int:
    try:
        return parse_time_s(text)
    except UnitError as exc:
        raise UsageError(str(exc)) from None


def _timestamp_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"invalid date/time {text!r}: expected epoch ms or ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


# -- arguments -----------------------------------------------------------------------------------------


def _sub_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-s", "--subscription", required=True, help="subscription name")


def _partitions_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-p", "--partitions", type=int, required=True, help="number of partitions")


def _create_sub_flags(parser: argparse.ArgumentParser) -> None:
    _sub_flag(parser)
    parser.add_argument("-m", "--messageId", dest="message_id", default="latest",
                        help="latest, earliest or ledgerId:entryId (default latest)")  # fmt: skip


def _reset_flags(parser: argparse.ArgumentParser) -> None:
    _sub_flag(parser)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("-t", "--time", help="reset to this long ago (e.g. 10m, 3h)")
    which.add_argument("-m", "--messageId", dest="message_id", help="reset to ledgerId:entryId")


# -- actions -------------------------------------------------------------------------------------------


def _create_subscription(client: C, args: A) -> Any:
    choice = args.message_id
    body: Any = choice if choice in ("latest", "earliest") else _position(choice)
    return client.put(_sub(args), body)


def _reset_cursor(client: C, args: A) -> Any:
    if args.message_id is not None:
        return client.post(_sub(args, "/resetcursor"), _position(args.message_id))
    target_ms = int(time.time() * 1000) - _seconds(args.time) * 1000
    return client.post(_sub(args, f"/resetcursor/{target_ms}"))


def _messages_at(client: C, path: str, **params: Any) -> list[AdminMessage]:
    answer = client.get_raw(path, **params)
    try:
        return parse_message_response(answer.content_type, answer.headers, answer.body)
    except MessageFormatError as exc:
        raise AdminApiError(0, f"unexpected answer to GET {path}: {exc}") from None


def _peek(client: C, args: A) -> Any:
    """The first ``--count`` messages of the backlog, position by position (an entry may hold several);
    fewer when the backlog is shorter, as pulsar-admin stops at the first position not found."""
    if not 0 < args.count <= PEEK_MESSAGES_MAX:
        raise UsageError(f"--count must be in 1..{PEEK_MESSAGES_MAX}")
    found: list[AdminMessage] = []
    for position in range(1, args.count + 1):
        try:
            found += _messages_at(client, _sub(args, f"/position/{position}"))
        except AdminApiError as exc:
            if exc.status == 404 and exc.reason == "Message not found":
                break
            raise
        if len(found) >= args.count:
            break
    return views(found[: args.count], args.payload_format)


def _message_by_id(client: C, args: A) -> Any:
    path = _t(args, f"/ledger/{args.ledger_id}/entry/{args.entry_id}")
    return views(_messages_at(client, path), args.payload_format)


def _examine(client: C, args: A) -> Any:
    messages = _messages_at(
        client,
        _t(args, "/examinemessage"),
        initialPosition=args.initial_position,
        messagePosition=args.message_position,
    )
    return views(messages, args.payload_format)


def _payload_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--payload-format",
        choices=PAYLOAD_FORMATS,
        default="auto",
        help="how payloads print: auto (UTF-8 text, else base64), text, base64 or hex (default auto)",
    )


def _set_topic_ttl(client: C, args: A) -> Any:
    return client.post(_t(args, "/messageTTL"), messageTTL=_seconds(args.ttl))


def _set_topic_retention(client: C, args: A) -> Any:
    try:
        body = retention_body(args.time, args.size)
    except UnitError as exc:
        raise UsageError(str(exc)) from None
    return client.post(_t(args, "/retention"), body)


NS = positional("namespace", "tenant/namespace")

SUBSCRIPTION_VERBS = [
    Verb("create-subscription", "create a subscription", _create_subscription,
         combine(TOPIC, _create_sub_flags)),
    Verb("unsubscribe", "delete a subscription", lambda c, a: c.delete(_sub(a), force=a.force),
         combine(TOPIC, _sub_flag, force_flag)),
    Verb("skip", "skip messages of a subscription", lambda c, a: c.post(_sub(a, f"/skip/{a.count}")),
         combine(TOPIC, _sub_flag, option("-n", "--count", type=int, required=True))),
    Verb("clear-backlog", "skip every message of a subscription", lambda c, a: c.post(_sub(a, "/skip_all")),
         combine(TOPIC, _sub_flag)),
    Verb("expire-messages", "expire messages older than a time",
         lambda c, a: c.post(_sub(a, f"/expireMessages/{_seconds(a.expire_time)}")),
         combine(TOPIC, _sub_flag,
                 option("-t", "--expireTime", dest="expire_time", required=True))),
    Verb("reset-cursor", "reset a subscription to a time or message id", _reset_cursor,
         combine(TOPIC, _reset_flags)),
    Verb("peek-messages", "peek at the first messages of a subscription", _peek,
         combine(TOPIC, _sub_flag, option("-n", "--count", type=int, default=1,
                                          help="messages to show (default 1)"), _payload_flag)),
]  # fmt: skip

TOPICS = [
    Verb("list", "list a namespace's topics (persistent and non-persistent)", _list_topics, NS),
    Verb("list-partitioned-topics", "list partitioned topics",
         lambda c, a: c.get(_ns_topics(a, "/partitioned")),
         NS),
    Verb("create", "create a non-partitioned topic", lambda c, a: c.put(_t(a), _properties(a.metadata)),
         combine(TOPIC, option("-m", "--metadata", help="properties k=v,k2=v2"))),
    Verb("create-partitioned-topic", "create a partitioned topic",
         lambda c, a: c.put(_t(a, "/partitions"), a.partitions), combine(TOPIC, _partitions_flag)),
    Verb("update-partitioned-topic", "increase the number of partitions",
         lambda c, a: c.post(_t(a, "/partitions"), a.partitions), combine(TOPIC, _partitions_flag)),
    Verb("get-partitioned-topic-metadata", "partitioned-topic metadata",
         lambda c, a: c.get(_t(a, "/partitions")), TOPIC),
    Verb("delete", "delete a topic", lambda c, a: c.delete(_t(a), force=a.force), combine(TOPIC, force_flag)),
    Verb("delete-partitioned-topic", "delete a partitioned topic",
         lambda c, a: c.delete(_t(a, "/partitions"), force=a.force), combine(TOPIC, force_flag)),
    Verb("unload", "unload a topic", lambda c, a: c.put(_t(a, "/unload")), TOPIC),
    Verb("terminate", "terminate a topic", lambda c, a: c.post(_t(a, "/terminate")), TOPIC),
    Verb("truncate", "delete every consumed closed ledger", lambda c, a: c.delete(_t(a, "/truncate")), TOPIC),
    Verb("stats", "topic stats", lambda c, a: c.get(_t(a, "/stats")), TOPIC),
    Verb("stats-internal", "internal (managed-ledger) stats",
         lambda c, a: c.get(_t(a, "/internalStats")), TOPIC),
    Verb("partitioned-stats", "stats of a partitioned topic, added up over its partitions",
         lambda c, a: c.get(_t(a, "/partitioned-stats"), perPartition=a.per_partition),
         combine(TOPIC, option("--per-partition", action="store_true",
                               help="also each partition's own stats"))),
    *[Verb(name, "internal (managed-ledger) stats of every partition of a partitioned topic",
           lambda c, a: c.get(_t(a, "/partitioned-internalStats")), TOPIC)
      for name in ("partitioned-internal-stats", "partitioned-stats-internal")],
    Verb("last-message-id", "the last message id", lambda c, a: c.get(_t(a, "/lastMessageId")), TOPIC),
    Verb("get-message-by-id", "get the message(s) of an entry by ledger and entry id", _message_by_id,
         combine(TOPIC, option("-l", "--ledgerId", dest="ledger_id", type=int, required=True,
                               help="ledger id"),
                 option("-e", "--entryId", dest="entry_id", type=int, required=True, help="entry id"),
                 _payload_flag)),
    Verb("examine-message", "examine the n-th message from the earliest or latest", _examine,
         combine(TOPIC, option("-i", "--initialPosition", dest="initial_position",
                               choices=["earliest", "latest"], default="latest",
                               help="count from the earliest or the latest (default latest)"),
                 option("-m", "--messagePosition", dest="message_position", type=int, default=1,
                        help="the n-th entry from there, 1 first (default 1)"),
                 _payload_flag)),
    Verb("get-message-id", "the message id at or after a time",
         lambda c, a: c.get(_t(a, f"/messageid/{_timestamp_ms(a.datetime)}")),
         combine(TOPIC, option("-d", "--datetime", required=True, help="epoch ms or ISO"))),
    Verb("subscriptions", "list a topic's subscriptions", lambda c, a: c.get(_t(a, "/subscriptions")), TOPIC),
    *SUBSCRIPTION_VERBS,
    Verb("set-retention", "set topic retention", _set_topic_retention, combine(TOPIC, retention_flags)),
    Verb("get-retention", "get topic retention", lambda c, a: c.get(_t(a, "/retention"), applied=a.applied),
         combine(TOPIC, option("--applied", action="store_true"))),
    Verb("remove-retention", "remove topic retention", lambda c, a: c.delete(_t(a, "/retention")), TOPIC),
    Verb("set-message-ttl", "set topic message TTL", _set_topic_ttl,
         combine(TOPIC, option("-t", "-ttl", "--ttl", dest="ttl", required=True))),
    Verb("get-message-ttl", "get topic message TTL",
         lambda c, a: c.get(_t(a, "/messageTTL"), applied=a.applied),
         combine(TOPIC, option("--applied", action="store_true"))),
    Verb("remove-message-ttl", "remove topic message TTL",
         lambda c, a: c.delete(_t(a, "/messageTTL")), TOPIC),
    Verb("set-backlog-quota", "set a topic backlog quota",
         lambda c, a: c.post(_t(a, "/backlogQuota"), quota_body(a), backlogQuotaType=a.type),
         combine(TOPIC, quota_flags)),
    Verb("get-backlog-quotas", "get topic backlog quotas",
         lambda c, a: c.get(_t(a, "/backlogQuotaMap")), TOPIC),
    Verb("remove-backlog-quota", "remove a topic backlog quota",
         lambda c, a: c.delete(_t(a, "/backlogQuota"), backlogQuotaType=a.type),
         combine(TOPIC, option("-t", "--type", default="destination_storage",
                                                 choices=QUOTA_TYPES))),
    Verb("permissions", "get the effective permissions on a topic", lambda c, a: c.get(_t(a, "/permissions")),
         TOPIC),
    Verb("grant-permission", "grant a role actions (produce, consume ...) on a topic",
         lambda c, a: c.post(_t(a, f"/permissions/{quote(a.role, safe='')}"), _csv(a.actions)),
         combine(TOPIC, option("--role", required=True, help="the role"),
                 option("--actions", required=True, help="comma-separated: produce,consume"))),
    Verb("revoke-permission", "revoke a role's actions on a topic",
         lambda c, a: c.delete(_t(a, f"/permissions/{quote(a.role, safe='')}")),
         combine(TOPIC, option("--role", required=True, help="the role"))),
]  # fmt: skip

SUBSCRIPTIONS = [
    Verb("list", "list a topic's subscriptions", lambda c, a: c.get(_t(a, "/subscriptions")), TOPIC),
    Verb("create", "create a subscription", _create_subscription, combine(TOPIC, _create_sub_flags)),
    Verb("delete", "delete a subscription", lambda c, a: c.delete(_sub(a), force=a.force),
         combine(TOPIC, _sub_flag, force_flag)),
    *[v for v in SUBSCRIPTION_VERBS if v.name not in ("create-subscription", "unsubscribe")],
]  # fmt: skip
