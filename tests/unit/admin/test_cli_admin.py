"""``magnetar admin`` against a running admin server (HTTP on port 0).

The CLI runs in a worker thread (``admin_main`` with its own output streams) while the server runs in the
test's trio loop: each call is a real HTTP exchange through the same code path as the installed command, at
a fraction of a subprocess's start-up cost. One test runs the real ``magnetar`` process to pin the exit code
and stderr contract.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
import trio
from fixtures.admin import AdminServer

from magnetar.admin.cli.admin_client import admin_main
from magnetar.admin.cli.admin_client.units import UnitError, parse_size_bytes, parse_time_s, retention_body


async def cli(server: AdminServer, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = ["--admin-url", server.base_url, *argv]
    code = await trio.to_thread.run_sync(lambda: admin_main(args, out, err))
    return code, out.getvalue(), err.getvalue()


async def cli_json(server: AdminServer, *argv: str) -> object:
    code, out, err = await cli(server, *argv)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("120", 120),
        ("100m", 6000),
        ("3h", 10800),
        ("2d", 172800),
        ("5w", 3024000),
        ("1y", 31536000),
        ("-1", -1),
    ],
)
def test_time_units(text: str, seconds: int) -> None:
    assert parse_time_s(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"), [("4096", 4096), ("10M", 10 << 20), ("16G", 16 << 30), ("3T", 3 << 40), ("2k", 2048)]
)
def test_size_units(text: str, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "1x", "abc", "-2", "1.5h", "m"])
def test_bad_units(text: str) -> None:
    with pytest.raises(UnitError):
        parse_time_s(text)


def test_retention_body_as_pulsar_admin_sends_it() -> None:
    assert retention_body("1h", "1G") == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}
    assert retention_body("-1", "-1") == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert retention_body("0", "0") == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert retention_body("30", "100k") == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}


async def test_tenants_and_namespaces_from_the_cli(admin_server: AdminServer) -> None:
    assert await cli_json(admin_server, "clusters", "list") == ["standalone"]
    assert (await cli(admin_server, "brokers", "healthcheck"))[1].strip() == "ok"
    assert await cli_json(admin_server, "brokers", "list", "standalone") == ["127.0.0.1:8080"]
    code, out, err = await cli(admin_server, "tenants", "create", "acme")  # clusters default to all
    assert (code, out, err) == (0, "", "")
    assert await cli_json(admin_server, "tenants", "get", "acme") == {
        "adminRoles": [],
        "allowedClusters": ["standalone"],
    }
    assert (await cli(admin_server, "tenants", "update", "acme", "-r", "ops,dev"))[0] == 0
    assert await cli_json(admin_server, "tenants", "list") == ["acme", "public"]
    assert (await cli(admin_server, "namespaces", "create", "acme/orders", "-b", "8"))[0] == 0
    assert await cli_json(admin_server, "namespaces", "list", "acme") == ["acme/orders"]
    policies = await cli_json(admin_server, "namespaces", "policies", "acme/orders")
    assert isinstance(policies, dict)
    assert policies["bundles"]["numBundles"] == 8
    code, out, _ = await cli(admin_server, "--output", "table", "tenants", "list")
    assert out.splitlines() == ["VALUE", "acme", "public"]

    code, _, err = await cli(admin_server, "tenants", "delete", "acme")
    assert (code, err.strip()) == (1, "error: 409 The tenant still has active namespaces")
    assert (await cli(admin_server, "namespaces", "delete", "acme/orders"))[0] == 0
    assert (await cli(admin_server, "tenants", "delete", "acme"))[0] == 0


async def test_retention_ttl_and_quota_from_the_cli(admin_server: AdminServer) -> None:
    ns = "public/default"
    code, _, err = await cli(admin_server, "namespaces", "set-retention", ns, "--time", "1h", "--size", "1G")
    assert (code, err) == (0, "")
    assert await cli_json(admin_server, "namespaces", "get-retention", ns) == {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": 1024,
    }
    code, _, err = await cli(admin_server, "namespaces", "set-retention", ns, "-t", "0", "-s", "10M")
    assert code == 1
    assert err.startswith("error: 412 Invalid retention policy")
    code, _, err = await cli(admin_server, "namespaces", "set-retention", ns, "-t", "1x", "-s", "1G")
    assert code == 2
    assert "invalid time unit" in err
    assert (await cli(admin_server, "namespaces", "remove-retention", ns))[0] == 0
    assert await cli(admin_server, "namespaces", "get-retention", ns) == (0, "", "")

    assert (await cli(admin_server, "namespaces", "set-message-ttl", ns, "-ttl", "2h"))[0] == 0
    assert await cli_json(admin_server, "namespaces", "get-message-ttl", ns) == 7200
    assert (await cli(admin_server, "namespaces", "remove-message-ttl", ns))[0] == 0

    quota = ["namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "producer_exception"]
    assert (await cli(admin_server, *quota))[0] == 0
    quotas = await cli_json(admin_server, "namespaces", "get-backlog-quotas", ns)
    assert quotas == {
        "destination_storage": {"limitSize": 10 << 20, "limitTime": -1, "policy": "producer_exception"}
    }
    assert (await cli(admin_server, "namespaces", "remove-backlog-quota", ns))[0] == 0
    assert await cli_json(admin_server, "namespaces", "get-backlog-quotas", ns) == {}


async def test_topics_from_the_cli(admin_server: AdminServer) -> None:
    topic = "persistent://public/default/orders"
    assert (await cli(admin_server, "topics", "create-partitioned-topic", topic, "-p", "2"))[0] == 0
    assert await cli_json(admin_server, "topics", "get-partitioned-topic-metadata", topic) == {
        "partitions": 2,
        "deleted": False,
    }
    assert (await cli(admin_server, "topics", "update-partitioned-topic", "orders", "-p", "3"))[0] == 0
    assert await cli_json(admin_server, "topics", "list-partitioned-topics", "public/default") == [topic]
    listed = await cli_json(admin_server, "topics", "list", "public/default")
    assert listed == [f"{topic}-partition-{i}" for i in range(3)]
    retention = ["topics", "set-retention", topic, "-t", "-1", "-s", "-1"]
    assert (await cli(admin_server, *retention))[0] == 0
    assert await cli_json(admin_server, "topics", "get-retention", topic) == {
        "retentionTimeInMinutes": -1,
        "retentionSizeInMB": -1,
    }
    assert (await cli(admin_server, "topics", "set-message-ttl", topic, "-t", "10m"))[0] == 0
    assert await cli_json(admin_server, "topics", "get-message-ttl", topic) == 600
    code, _, err = await cli(admin_server, "topics", "create-partitioned-topic", "bad/name", "-p", "1")
    assert code == 2
    assert "Invalid short topic name" in err
    assert (await cli(admin_server, "topics", "delete-partitioned-topic", topic))[0] == 0


async def test_unreachable_server_is_an_error() -> None:
    out, err = io.StringIO(), io.StringIO()
    args = ["--admin-url", "http://127.0.0.1:1", "tenants", "list"]
    code = await trio.to_thread.run_sync(lambda: admin_main(args, out, err))
    assert code == 1
    assert err.getvalue().startswith("error: cannot reach")


async def test_the_real_command_exits_non_zero_with_the_reason(admin_server: AdminServer) -> None:
    magnetar = Path(sys.executable).with_name("magnetar")
    env = {**os.environ, "MAGNETAR_ADMIN_URL": admin_server.base_url}
    result = await trio.run_process(
        [str(magnetar), "admin", "tenants", "get", "nobody"],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.decode().strip() == "error: 404 Tenant does not exist"
    ok = await trio.run_process([str(magnetar), "admin", "tenants", "list"], env=env, capture_stdout=True)
    assert json.loads(ok.stdout) == ["public"]


async def test_initialize_cluster_metadata_is_idempotent(tmp_path: Path) -> None:
    magnetar = Path(sys.executable).with_name("magnetar")
    url = f"rocksdb://{tmp_path / 'meta'}"
    argv = [str(magnetar), "initialize-cluster-metadata", "--metadata-url", url, "--cluster", "standalone",
            "--web-service-url", "http://127.0.0.1:8080"]  # fmt: skip
    from magnetar.bookkeeper.metadata import open_metadata_store
    from magnetar.bookkeeper.metadata.bookies import read_instance_id

    instance_ids = set()
    for _ in range(2):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["namespace"] == "public/default"
        async with open_metadata_store(url) as store:  # BookKeeper's /ledgers/INSTANCEID, written once
            instance_ids.add(await read_instance_id(store))
    assert len(instance_ids) == 1
    assert None not in instance_ids
    bad = await trio.run_process(
        [str(magnetar), "initialize-cluster-metadata", "--metadata-url", url, "--cluster", "bad name"],
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    from magnetar.broker.policies.store import PolicyStore

    async with open_metadata_store(url) as store:
        policies = PolicyStore(store)
        assert await policies.clusters() == ["standalone"]
        assert await policies.namespaces("public") == ["public/default"]
