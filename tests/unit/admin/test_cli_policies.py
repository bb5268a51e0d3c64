"""``magnetar admin namespaces|topics set-*/get-*/remove-*`` for the catalogue's policies, against a
running admin server (the CLI in a worker thread, as in :mod:`test_cli_admin`)."""

from __future__ import annotations

import io
import json

import trio
from fixtures.admin import AdminServer

from magnetar.admin.cli.admin_client import admin_main
from magnetar.broker.policies.catalogue import CATALOGUE
from magnetar.managed_ledger.info import ManagedLedgerInfo
from magnetar.managed_ledger.meta_store import ledger_path

NS = "public/default"


async def cli(server: AdminServer, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = ["--admin-url", server.base_url, *argv]
    code = await trio.to_thread.run_sync(lambda: admin_main(args, out, err))
    return code, out.getvalue(), err.getvalue()


async def ok_json(server: AdminServer, *argv: str) -> object:
    code, out, err = await cli(server, *argv)
    assert code == 0, err
    return json.loads(out)


async def test_every_catalogue_policy_has_its_three_verbs(admin_server: AdminServer) -> None:
    for spec in CATALOGUE:
        for group, verb in (("namespaces", spec.ns_verb), ("topics", spec.topic_verb)):
            if verb is None:
                continue
            for action in ("set", "get", "remove"):
                code, _, _ = await cli(admin_server, group, f"{action}-{verb}", "--help")
                assert code == 0, f"{group} {action}-{verb}"


async def test_namespace_counts_and_objects(admin_server: AdminServer) -> None:
    assert (await cli(admin_server, "namespaces", "set-max-producers-per-topic", NS, "-p", "4"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-max-producers-per-topic", NS) == 4
    code, _, err = await cli(admin_server, "namespaces", "set-max-consumers-per-topic", NS, "-c", "-1")
    assert (code, err.strip()) == (1, "error: 412 maxConsumersPerTopic must be 0 or more")
    assert (await cli(admin_server, "namespaces", "remove-max-producers-per-topic", NS))[0] == 0
    assert await cli(admin_server, "namespaces", "get-max-producers-per-topic", NS) == (0, "", "")

    persistence = ["namespaces", "set-persistence", NS, "-e", "3", "-w", "2", "-a", "2", "-r", "1.5"]
    assert (await cli(admin_server, *persistence))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-persistence", NS) == {
        "bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2,
        "managedLedgerMaxMarkDeleteRate": 1.5,
    }  # fmt: skip
    code, _, err = await cli(
        admin_server, "namespaces", "set-persistence", NS, "-e", "1", "-w", "2", "-a", "1"
    )
    assert (code, err.strip()) == (
        1,
        "error: 400 Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuorum (1)",
    )

    auto = ["namespaces", "set-auto-topic-creation", NS, "-e", "-t", "partitioned", "-n", "3"]
    assert (await cli(admin_server, *auto))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-auto-topic-creation", NS) == {
        "allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3,
    }  # fmt: skip
    assert (await cli(admin_server, "namespaces", "set-auto-subscription-creation", NS))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-auto-subscription-creation", NS) == {
        "allowAutoSubscriptionCreation": False
    }
    inactive = ["namespaces", "set-inactive-topic-policies", NS, "-e", "-t", "10m", "-m",
                "delete_when_subscriptions_caught_up"]  # fmt: skip
    assert (await cli(admin_server, *inactive))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-inactive-topic-policies", NS) == {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 600,
        "deleteWhileInactive": True,
    }
    assert (await cli(admin_server, "namespaces", "set-subscription-expiration-time", NS, "-t", "30"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-subscription-expiration-time", NS) == 30


async def test_topic_level_with_applied(admin_server: AdminServer) -> None:
    await admin_server.metadata.put(
        ledger_path("public/default/persistent/t1"), ManagedLedgerInfo().encode(), -1
    )
    topic = "persistent://public/default/t1"
    assert (await cli(admin_server, "namespaces", "set-max-unacked-messages-per-consumer", NS, "-m", "9"))[
        0
    ] == 0
    assert await cli(admin_server, "topics", "get-max-unacked-messages-per-consumer", topic) == (0, "", "")
    assert (
        await ok_json(admin_server, "topics", "get-max-unacked-messages-per-consumer", topic, "--applied")
        == 9
    )
    assert (await cli(admin_server, "topics", "set-max-producers", topic, "-p", "2"))[0] == 0
    assert await ok_json(admin_server, "topics", "get-max-producers", topic) == 2
    assert (await cli(admin_server, "topics", "remove-max-producers", topic))[0] == 0
    assert await ok_json(admin_server, "topics", "get-max-producers", topic, "--applied") == 0


async def test_delayed_delivery_verbs(admin_server: AdminServer) -> None:
    set_verb = ["namespaces", "set-delayed-delivery", NS]
    assert (await cli(admin_server, *set_verb, "-d", "-t", "2s", "-md", "1m"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-delayed-delivery", NS) == {
        "active": False, "tickTime": 2000, "maxDeliveryDelayInMillis": 60_000,
    }  # fmt: skip
    code, _, err = await cli(admin_server, *set_verb)
    assert (code, err.strip()) == (2, "error: Need to specify either --enable or --disable")
    code, _, err = await cli(admin_server, *set_verb, "-e", "-t", "soon")
    assert code != 0
    assert "soon" in err
    assert (await cli(admin_server, "namespaces", "remove-delayed-delivery", NS))[0] == 0
    assert await cli(admin_server, "namespaces", "get-delayed-delivery", NS) == (0, "", "")


async def test_rate_verbs_with_pulsar_admins_flags(admin_server: AdminServer) -> None:
    assert (await cli(admin_server, "namespaces", "set-publish-rate", NS, "-m", "100", "-b", "2048"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-publish-rate", NS) == {
        "publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 2048,
    }  # fmt: skip
    dispatch = ["namespaces", "set-dispatch-rate", NS, "-md", "50", "-bd", "-1", "-dt", "2", "-rp"]
    assert (await cli(admin_server, *dispatch))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-dispatch-rate", NS) == {
        "dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": True, "ratePeriodInSecond": 2,
    }  # fmt: skip
    sub = ["namespaces", "set-subscription-dispatch-rate", NS, "--msg-dispatch-rate", "7"]
    assert (await cli(admin_server, *sub))[0] == 0
    got = await ok_json(admin_server, "namespaces", "get-subscription-dispatch-rate", NS)
    assert isinstance(got, dict)
    assert got["dispatchThrottlingRateInMsg"] == 7
    assert (await cli(admin_server, "namespaces", "set-subscribe-rate", NS, "-sr", "3", "-st", "60"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-subscribe-rate", NS) == {
        "subscribeThrottlingRatePerConsumer": 3, "ratePeriodInSecond": 60,
    }  # fmt: skip
    code, _, _ = await cli(admin_server, "namespaces", "set-publish-rate", NS, "-m", "many")
    assert code == 2
    for verb in ("publish-rate", "dispatch-rate", "subscription-dispatch-rate", "subscribe-rate"):
        assert (await cli(admin_server, "namespaces", f"remove-{verb}", NS))[0] == 0
        assert await cli(admin_server, "namespaces", f"get-{verb}", NS) == (0, "", "")

    await admin_server.metadata.put(
        ledger_path("public/default/persistent/rated"), ManagedLedgerInfo().encode(), -1
    )
    topic = "persistent://public/default/rated"
    assert (await cli(admin_server, "topics", "set-publish-rate", topic, "-m", "10"))[0] == 0
    assert await ok_json(admin_server, "topics", "get-publish-rate", topic, "--applied") == {
        "publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1,
    }  # fmt: skip


async def test_deduplication_verbs(admin_server: AdminServer) -> None:
    assert (await cli(admin_server, "namespaces", "set-deduplication", NS, "--enable"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-deduplication", NS) is True
    assert (await cli(admin_server, "namespaces", "set-deduplication", NS, "-d"))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-deduplication", NS) is False
    code, _, err = await cli(admin_server, "namespaces", "set-deduplication", NS, "-e", "-d")
    assert code != 0
    assert "--enable or --disable" in err
    interval = ["namespaces", "set-deduplication-snapshot-interval", NS, "-i", "60"]
    assert (await cli(admin_server, *interval))[0] == 0
    assert await ok_json(admin_server, "namespaces", "get-deduplication-snapshot-interval", NS) == 60
    code, _, err = await cli(admin_server, *interval[:-1], "-5")
    assert (code, err.strip()) == (1, "error: 412 interval must be greater than or equal to 0")
    assert (await cli(admin_server, "namespaces", "remove-deduplication", NS))[0] == 0
    assert await cli(admin_server, "namespaces", "get-deduplication", NS) == (0, "", "")
