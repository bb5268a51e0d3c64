"""``set-*`` / ``get-*`` / ``remove-*`` verbs of ``magnetar admin namespaces|topics`` for every policy of
the catalogue (:data:`~magnetar.broker.policies.catalogue.CATALOGUE`), with pulsar-admin's verb names and
flags: built from the table, as the admin API's routes are, so a policy added there gets its verbs here."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from magnetar.admin.cli.admin_client.client import AdminClient
from magnetar.admin.cli.admin_client.units import UnitError, parse_time_s
from magnetar.admin.cli.admin_client.verbs import (
    Arguments,
    UsageError,
    Verb,
    combine,
    namespace_path,
    option,
    positional,
    topic_path,
)
from magnetar.broker.policies import CATALOGUE, PolicySpec

A = argparse.Namespace
NS = positional("namespace", "tenant/namespace")
TOPIC = positional("topic", "persistent://tenant/namespace/topic (or a short name)")
SHORT_FLAGS = {
    "producers": "-p",
    "consumers": "-c",
    "subscriptions": "-m",
    "unacked": "-m",
    "expiration": "-t",
    "Interval": "-i",
}
LONG_FLAGS = {"deduplicationSnapshotIntervalSeconds": "interval"}
"""pulsar-admin's long flag where it is not the verb's name."""


def _short_flag(spec: PolicySpec) -> str:
    return next(flag for word, flag in SHORT_FLAGS.items() if word in spec.field)


def _time_s(text: str) -> int:
    try:
        return parse_time_s(text)
    except UnitError as exc:
        raise UsageError(str(exc)) from None


def _body_arguments(spec: PolicySpec, verb: str) -> tuple[Arguments, Callable[[A], Any]]:
    """The flags of ``set-<verb>`` and the request body built from them."""
    if spec.kind == "int":
        long_flag = LONG_FLAGS.get(spec.field, verb)
        dest = long_flag.replace("-", "_")
        return (
            option(_short_flag(spec), f"--{long_flag}", dest=dest, type=int, required=True, help=spec.help),
            lambda a: getattr(a, dest),
        )
    if spec.kind == "bool":
        return combine(
            option("-e", "--enable", action="store_true", help="turn it on"),
            option("-d", "--disable", action="store_true", help="turn it off"),
        ), _enable_or_disable
    if spec.kind == "persistence":
        return combine(
            option(
                "-e", "--bookkeeper-ensemble", type=int, required=True, help="ensemble size of new ledgers"
            ),
            option("-w", "--bookkeeper-write-quorum", type=int, required=True, help="copies of each entry"),
            option("-a", "--bookkeeper-ack-quorum", type=int, required=True, help="acknowledged copies"),
            option(
                "-r",
                "--ml-mark-delete-max-rate",
                type=float,
                default=0.0,
                help="mark-delete persistences per second per cursor (0 = unthrottled)",
            ),
        ), lambda a: {
            "bookkeeperEnsemble": a.bookkeeper_ensemble,
            "bookkeeperWriteQuorum": a.bookkeeper_write_quorum,
            "bookkeeperAckQuorum": a.bookkeeper_ack_quorum,
            "managedLedgerMaxMarkDeleteRate": a.ml_mark_delete_max_rate,
        }
    if spec.kind == "inactive":
        return combine(
            option(
                "-e", "--enable-delete-while-inactive", action="store_true", help="delete inactive topics"
            ),
            option("-t", "--max-inactive-duration", required=True, help="e.g. 60s, 10m, 1h"),
            option(
                "-m",
                "--delete-mode",
                required=True,
                choices=["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"],
            ),
        ), lambda a: {
            "inactiveTopicDeleteMode": a.delete_mode,
            "maxInactiveDurationSeconds": _time_s(a.max_inactive_duration),
            "deleteWhileInactive": a.enable_delete_while_inactive,
        }
    if spec.kind == "auto_topic":
        return combine(
            option("-e", "--enable", action="store_true", help="allow automatic topic creation"),
            option("-t", "--type", choices=["partitioned", "non-partitioned"], default="non-partitioned"),
            option("-n", "--num-partitions", type=int, help="partitions of a created partitioned topic"),
        ), lambda a: {
            "allowAutoTopicCreation": a.enable,
            "topicType": a.type,
            **({"defaultNumPartitions": a.num_partitions} if a.num_partitions is not None else {}),
        }
    if spec.kind == "delayed":
        return combine(
            option("-e", "--enable", action="store_true", help="hold delayed messages back (the default)"),
            option("-d", "--disable", action="store_true", help="deliver every message at once"),
            option("-t", "--time", default="1s", help="tick time (s, m, h, d, w, y; default 1s)"),
            option("-md", "--maxDelay", dest="max_delay", default="0s", help="longest delay, 0 = no cap"),
        ), _delayed_body
    if spec.kind in RATE_ARGUMENTS:
        return RATE_ARGUMENTS[spec.kind]()
    return option("-e", "--enable", action="store_true", help="allow automatic subscription creation"), (
        lambda a: {"allowAutoSubscriptionCreation": a.enable}
    )


def _delayed_body(a: A) -> dict[str, Any]:
    if a.enable == a.disable:
        raise UsageError("Need to specify either --enable or --disable")
    return {
        "active": a.enable,
        "tickTime": _time_s(a.time) * 1000,
        "maxDeliveryDelayInMillis": _time_s(a.max_delay) * 1000,
    }


def _publish_rate() -> tuple[Arguments, Callable[[A], Any]]:
    return combine(
        option("-m", "--msg-publish-rate", type=int, default=-1, help="messages per second (-1: off)"),
        option("-b", "--byte-publish-rate", type=int, default=-1, help="bytes per second (-1: off)"),
    ), lambda a: {
        "publishThrottlingRateInMsg": a.msg_publish_rate,
        "publishThrottlingRateInByte": a.byte_publish_rate,
    }


def _dispatch_rate() -> tuple[Arguments, Callable[[A], Any]]:
    return combine(
        option("-md", "--msg-dispatch-rate", type=int, default=-1, help="messages per period (-1: off)"),
        option("-bd", "--byte-dispatch-rate", type=int, default=-1, help="bytes per period (-1: off)"),
        option("-dt", "--dispatch-rate-period", type=int, default=1, help="the period in seconds"),
        option("-rp", "--relative-to-publish-rate", action="store_true", help="add the topic's publish rate"),
    ), lambda a: {
        "dispatchThrottlingRateInMsg": a.msg_dispatch_rate,
        "dispatchThrottlingRateInByte": a.byte_dispatch_rate,
        "ratePeriodInSecond": a.dispatch_rate_period,
        "relativeToPublishRate": a.relative_to_publish_rate,
    }


def _subscribe_rate() -> tuple[Arguments, Callable[[A], Any]]:
    return combine(
        option("-sr", "--subscribe-rate", type=int, default=-1, help="subscribes per period (-1: off)"),
        option("-st", "--subscribe-rate-period", type=int, default=30, help="the period in seconds"),
    ), lambda a: {
        "subscribeThrottlingRatePerConsumer": a.subscribe_rate,
        "ratePeriodInSecond": a.subscribe_rate_period,
    }


RATE_ARGUMENTS: dict[str, Callable[[], tuple[Arguments, Callable[[A], Any]]]] = {
    "publish_rate": _publish_rate,
    "dispatch_rate": _dispatch_rate,
    "subscribe_rate": _subscribe_rate,
}


def _enable_or_disable(args: A) -> bool:
    """pulsar-admin's ``--enable`` / ``--disable``: exactly one of them."""
    if args.enable == args.disable:
        raise UsageError("Need to specify either --enable or --disable")
    return bool(args.enable)


def _verbs(
    spec: PolicySpec, verb: str, path: Callable[[A], str], target: Arguments, topic: bool
) -> list[Verb]:
    flags, body = _body_arguments(spec, verb)

    def get(c: AdminClient, a: A) -> Any:
        return c.get(path(a), applied=a.applied) if topic else c.get(path(a))

    get_args = combine(target, option("--applied", action="store_true")) if topic else target
    return [
        Verb(
            f"set-{verb}", f"set {spec.help}", lambda c, a: c.post(path(a), body(a)), combine(target, flags)
        ),
        Verb(f"get-{verb}", f"get {spec.help}", get, get_args),
        Verb(f"remove-{verb}", f"remove {spec.help}", lambda c, a: c.delete(path(a)), target),
    ]


def _under(base: Callable[[A], str], segment: str) -> Callable[[A], str]:
    def path(args: A) -> str:
        return f"{base(args)}/{segment}"

    return path


def namespace_policy_verbs() -> list[Verb]:
    verbs: list[Verb] = []
    for spec in CATALOGUE:
        path = _under(lambda a: namespace_path(a.namespace), spec.ns_path)
        verbs += _verbs(spec, spec.ns_verb, path, NS, False)
    return verbs


def topic_policy_verbs() -> list[Verb]:
    verbs: list[Verb] = []
    for spec in CATALOGUE:
        if spec.topic_path is None or spec.topic_verb is None:
            continue
        path = _under(lambda a: topic_path(a.topic), spec.topic_path)
        verbs += _verbs(spec, spec.topic_verb, path, TOPIC, True)
    return verbs
