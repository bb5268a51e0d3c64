"""``wait-for-metadata``, and ``initialize-cluster-metadata``'s arguments and retry budget (the Helm chart's
start-up order).

The wait runs on named in-process memory stores (shared by name within the process): what it waits for is
created while it waits, and each check that finds something missing says what in one log line. The ZooKeeper
side (an unreachable store, then one that starts) is covered with real processes in
``tests/helm/test_rendered_processes.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from pathlib import Path

import pytest
import trio

from magnetar.admin.processes.cluster_init import (
    RETRY_DELAY_MAX_S,
    Awaited,
    ClusterInit,
    MetadataWaitTimeoutError,
    initialize_cluster_metadata,
    missing_metadata,
    retry_budget_s,
    wait_for_metadata,
)
from magnetar.bookkeeper.metadata import open_metadata_store
from magnetar.bookkeeper.metadata.bookies import BookieServiceInfo, writable_path
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.broker.policies.store import PolicyStore


def store_url() -> tuple[str, MemoryMetadataStore]:
    name = f"wait-{uuid.uuid4().hex}"
    return f"memory://{name}", MemoryMetadataStore(name)


async def register_bookie(store: MemoryMetadataStore, bookie_id: str) -> None:
    host, _, port = bookie_id.rpartition(":")
    info = BookieServiceInfo(bookie_id, host, int(port))
    await store.put(writable_path(bookie_id), info.to_json(), None, ephemeral=True)


async def test_missing_metadata_names_what_is_missing_until_everything_is_there() -> None:
    _, store = store_url()
    awaited = Awaited(cluster="prod", bookies_min=2)
    assert "cluster 'prod' is not initialized yet" in str(await missing_metadata(store, awaited))
    await initialize_cluster_metadata(store, ClusterInit("prod", "http://svc:8080", bundles=8))
    assert await missing_metadata(store, awaited) == "0 of 2 bookies needed are registered and writable"
    await register_bookie(store, "b1:3181")
    await register_bookie(store, "b2:3181")
    assert await missing_metadata(store, awaited) is None
    assert await missing_metadata(store, Awaited()) is None
    await store.aclose()


async def test_the_wait_returns_once_the_init_job_has_run(caplog: pytest.LogCaptureFixture) -> None:
    url, store = store_url()
    caplog.set_level(logging.INFO, logger="magnetar.admin.processes.cluster_init")
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def wait() -> None:
            await wait_for_metadata(url, Awaited(cluster="prod"), check_interval_s=0.01)
            done.set()

        nursery.start_soon(wait)
        await trio.sleep(0.05)
        assert not done.is_set()
        await initialize_cluster_metadata(store, ClusterInit("prod", "http://svc:8080"))
        with trio.fail_after(5):
            await done.wait()
    waiting = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting: ")]
    assert waiting
    assert "cluster 'prod' is not initialized yet (magnetar initialize-cluster-metadata)" in waiting[0]
    assert "next check in 0.01s" in waiting[0]
    await store.aclose()


async def test_the_wait_gives_up_after_its_timeout_saying_what_is_missing() -> None:
    url, store = store_url()
    await initialize_cluster_metadata(store, ClusterInit("prod"))
    awaited = Awaited(cluster="prod", bookies_min=1)
    with pytest.raises(MetadataWaitTimeoutError, match=r"gave up after 0.2s: 0 of 1 bookies needed"):
        await wait_for_metadata(url, awaited, timeout_s=0.2, check_interval_s=0.05)
    await store.aclose()


def test_retry_budget_adds_every_attempt_and_the_capped_doubling_pauses() -> None:
    # 3 attempts, 1 s then 2 s pauses, each attempt 10 s for a session plus 2 s per server to say why not
    assert retry_budget_s(3, 1.0, 10.0, servers=1) == 3 * 12 + 1 + 2
    assert retry_budget_s(1, 5.0, 10.0, servers=3) == 16
    long = retry_budget_s(10, 2.0, 10.0, servers=1)
    assert long == 10 * 12 + 2 + 4 + 8 + 16 + 5 * RETRY_DELAY_MAX_S


async def test_the_init_command_takes_the_store_from_the_environment_and_every_service_url(
    tmp_path: Path,
) -> None:
    url = f"rocksdb://{tmp_path / 'meta'}"
    env = {**os.environ, "MAGNETAR_METADATA_URL": url, "MAGNETAR_CLUSTER": "prod"}
    argv = [
        sys.executable, "-m", "magnetar.admin.cli", "initialize-cluster-metadata",
        "--web-service-url", "http://svc:8080", "--web-service-url-tls", "https://svc:8443",
        "--broker-service-url", "pulsar://svc:6650", "--broker-service-url-tls", "pulsar+ssl://svc:6651",
        "--bundles", "8",
    ]  # fmt: skip
    done = await trio.run_process(argv, env=env, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr
    async with open_metadata_store(url) as store:
        policies = PolicyStore(store)
        cluster = await policies.get_cluster("prod")
        namespace = await policies.get_namespace("public/default")
    assert cluster is not None
    assert (cluster.serviceUrl, cluster.serviceUrlTls) == ("http://svc:8080", "https://svc:8443")
    assert (cluster.brokerServiceUrl, cluster.brokerServiceUrlTls) == (
        "pulsar://svc:6650",
        "pulsar+ssl://svc:6651",
    )
    assert namespace is not None
    assert namespace.bundles.numBundles == 8
    without = {k: v for k, v in env.items() if k != "MAGNETAR_CLUSTER"}
    missing = await trio.run_process(argv, env=without, capture_stdout=True, capture_stderr=True, check=False)
    assert missing.returncode == 2
    assert b"--cluster (or MAGNETAR_CLUSTER) is required" in missing.stderr


async def test_wait_for_metadata_refuses_bad_arguments() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAGNETAR_")}
    command = [sys.executable, "-m", "magnetar.admin.cli", "wait-for-metadata"]
    no_url = await trio.run_process(command, env=env, capture_stderr=True, check=False)
    assert no_url.returncode == 2
    assert b"--metadata-url (or MAGNETAR_METADATA_URL) is required" in no_url.stderr
    bad = await trio.run_process(
        [*command, "--metadata-url", "memory://x", "--bookies-min", "-1"],
        env=env,
        capture_stderr=True,
        check=False,
    )
    assert bad.returncode == 2
