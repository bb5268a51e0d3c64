"""The AutoRecovery REST API on a real HTTP server (in-process bookies behind it), and the
``magnetar admin bookies`` verbs that call it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from fixtures.autorecovery import FAST, Cluster, eventually, open_cluster, running_service

from magnetar.admin.cli.admin_client import admin_main
from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.http_api import BookieRoute, add_bookie_routes, autorecovery_routes
from magnetar.bookkeeper.autorecovery.service import AutoRecoveryService
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.metadata.bookies import cookie_path
from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest, HttpSettings, Router, serve_http

AR = "/api/v1/autorecovery"


@asynccontextmanager
async def api(
    cluster: Cluster, settings: AutoRecoverySettings = FAST, guard: Any = None
) -> AsyncIterator[tuple[str, AutoRecoveryService]]:
    async with running_service(cluster, settings) as service, trio.open_nursery() as nursery:
        router = Router()
        add_bookie_routes(router, autorecovery_routes(service), guard)
        http = HttpSettings(http_bind_address="127.0.0.1", http_port=0)
        ports: list[int] = await nursery.start(serve_http, router, http)
        yield f"http://127.0.0.1:{ports[0]}", service
        nursery.cancel_scope.cancel()


async def call(method: str, url: str, **kwargs: Any) -> httpx.Response:
    def run() -> httpx.Response:
        return httpx.request(method, url, timeout=30, **kwargs)

    return await trio.to_thread.run_sync(run)


async def admin(*argv: str) -> int:
    return await trio.to_thread.run_sync(lambda: admin_main(list(argv)))


async def test_list_under_replicated_who_is_auditor_delay_and_switch() -> None:
    async with open_cluster(4) as cluster, api(cluster) as (url, service):
        missing = await call("GET", f"{url}{AR}/list_under_replicated_ledger")
        assert missing.status_code == 404
        assert missing.text == "No under replicated ledgers found"
        await service.manager.set_enabled(False)  # nothing heals the marks made below
        await eventually(lambda: not service.daemon.switch.enabled, 10)
        await service.manager.mark(3, {"a:1"})
        await service.manager.mark(4, {"a:1", "b:1"})
        listed = await call("GET", f"{url}{AR}/list_under_replicated_ledger")
        assert listed.json() == [3, 4]
        detailed = await call("GET", f"{url}{AR}/list_under_replicated_ledger?printmissingreplica")
        assert detailed.json() == {"3": ["a:1"], "4": ["a:1", "b:1"]}
        only_b = await call("GET", f"{url}{AR}/list_under_replicated_ledger?missingreplica=b:1")
        assert only_b.json() == [4]
        not_b = await call("GET", f"{url}{AR}/list_under_replicated_ledger?excludingmissingreplica=b:1")
        assert not_b.json() == [3]

        await eventually(lambda: service.daemon.stats.auditor_elected, 10)
        assert (await call("GET", f"{url}{AR}/who_is_auditor")).text == "Auditor: daemon-0"

        assert (await call("GET", f"{url}{AR}/lost_bookie_recovery_delay")).text.endswith(": 0")
        put = await call("PUT", f"{url}{AR}/lost_bookie_recovery_delay", json={"delay_seconds": 60})
        assert put.text == "Success set lostBookieRecoveryDelay to 60"
        assert await service.manager.get_delay_s() == 60
        bad = await call("PUT", f"{url}{AR}/lost_bookie_recovery_delay", json={"delay": 1})
        assert bad.status_code == 400
        assert "delay_seconds" in bad.json()["reason"]

        assert (await call("GET", f"{url}{AR}/status")).json() == {"enabled": False}
        refused = await call("PUT", f"{url}{AR}/trigger_audit")
        assert refused.status_code == 409
        assert (await call("PUT", f"{url}{AR}/status?enabled=true")).json() == {"enabled": True}
        assert (await call("PUT", f"{url}{AR}/trigger_audit")).text == "Success trigger audit."
        assert (await call("PUT", f"{url}{AR}/status")).status_code == 400


async def test_cluster_info_bookies_and_ledger_metadata() -> None:
    async with open_cluster(4) as cluster, api(cluster) as (url, service):
        lh = await cluster.write(3)
        await eventually(lambda: service.daemon.stats.auditor_elected, 10)
        info = (await call("GET", f"{url}/api/v1/bookie/cluster_info")).json()
        assert info == {
            "auditorElected": True,
            "auditorId": "daemon-0",
            "clusterUnderReplicated": False,
            "ledgerReplicationEnabled": True,
            "totalBookiesCount": 4,
            "writableBookiesCount": 4,
            "readonlyBookiesCount": 0,
            "unavailableBookiesCount": 0,
        }
        bookies = (await call("GET", f"{url}/api/v1/bookie/list_bookies")).json()
        assert bookies == dict.fromkeys(cluster.bookies.ids)
        assert (await call("GET", f"{url}/api/v1/bookie/list_bookies?type=ro")).json() == {}
        assert (await call("GET", f"{url}/api/v1/ledger/list")).json() == {str(lh.ledger_id): None}
        answer = (await call("GET", f"{url}/api/v1/ledger/metadata?ledger_id={lh.ledger_id}")).json()
        metadata = answer[str(lh.ledger_id)]
        assert metadata["allEnsembles"] == {"0": list(lh.metadata.ensembles[0][1])}
        assert (metadata["state"], metadata["closed"], metadata["lastEntryId"]) == ("CLOSED", True, 2)
        assert (metadata["ensembleSize"], metadata["writeQuorumSize"], metadata["ackQuorumSize"]) == (3, 3, 2)
        assert "password" not in metadata
        listed = (await call("GET", f"{url}/api/v1/ledger/list?print_metadata=true")).json()
        assert listed[str(lh.ledger_id)]["allEnsembles"] == metadata["allEnsembles"]
        missing = await call("GET", f"{url}/api/v1/ledger/metadata?ledger_id=999")
        assert missing.status_code == 404
        assert (await call("GET", f"{url}/api/v1/ledger/metadata?ledger_id=x")).status_code == 400


async def test_decommission_a_live_bookie_with_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    async with open_cluster(4) as cluster, api(cluster) as (url, service):
        handles = [await cluster.write(40) for _ in range(3)]
        writing = await cluster.write(10, close=False)
        victim = writing.metadata.last_ensemble[1][0]
        await cluster.metadata.put(cookie_path(victim), b"its cookie", -1)
        code = await admin("bookies", "decommission", victim, "--bookie-url", url, "--interval-s", "0.2")
        assert code == 0
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[-1].startswith(f"decommission {victim}: done, ledgers ")
        assert lines[-1].endswith(", cookie deleted")
        assert not await cluster.metadata.exists(cookie_path(victim)), "its identity is retired"
        for lh in [*handles, writing]:
            metadata = await cluster.bk.get_ledger_metadata(lh.ledger_id)
            assert victim not in bookies_of(metadata)
            assert await cluster.under_replicated_entries(lh.ledger_id, {victim}) == []
        assert await service.manager.decommissioning() == [victim], "still running: still avoided"
        new = await cluster.write(2)
        assert victim not in bookies_of(new.metadata), "no new ensemble picks a decommissioned bookie"
        progress = (await call("GET", f"{url}{AR}/decommission?bookie_src={victim}")).json()
        assert progress["state"] == "done"
        assert progress["cookieDeleted"] is True
        assert progress["ledgersDone"] == progress["ledgersTotal"] >= 1
        assert (await call("PUT", f"{url}{AR}/decommission", json={"bookie_src": "nope"})).status_code == 400


async def test_recover_a_dead_bookie_and_list_with_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    async with open_cluster(4) as cluster:
        handles = [await cluster.write(20) for _ in range(2)]
        victim = handles[0].metadata.ensembles[0][1][0]
        await cluster.lose(victim)
        async with api(cluster, FAST.model_copy(update={"enabled": False})) as (url, _):
            assert await admin("bookies", "list", "--bookie-url", url) == 0
            listed = capsys.readouterr().out
            assert victim not in listed
            assert '"replicationEnabled": true' in listed
            assert await admin("bookies", "recover", victim, "--bookie-url", url, "--interval-s", "0.2") == 0
            assert "done" in capsys.readouterr().err
            for lh in handles:
                assert await cluster.under_replicated_entries(lh.ledger_id, {victim}) == []
            assert await admin("bookies", "list-under-replicated", "--bookie-url", url) == 0
            assert capsys.readouterr().out.strip() == "[]"
            assert await admin("bookies", "replication", "disable", "--bookie-url", url) == 0
            assert '"enabled": false' in capsys.readouterr().out
            assert await admin("bookies", "lost-bookie-recovery-delay", "7", "--bookie-url", url) == 0
            assert '"lostBookieRecoveryDelaySeconds": 7' in capsys.readouterr().out


async def test_mutating_routes_pass_through_one_guard() -> None:
    seen: list[tuple[str, bool]] = []

    async def guard(request: HttpRequest, route: BookieRoute) -> None:
        seen.append((route.path, route.mutating))
        if route.mutating and request.header("authorization") != "Bearer admin":
            raise HttpError(403, "superuser required")

    async with open_cluster(3) as cluster, api(cluster, guard=guard) as (url, _):
        assert (await call("GET", f"{url}{AR}/status")).status_code == 200
        assert (await call("PUT", f"{url}{AR}/status?enabled=false")).status_code == 403
        allowed = await call(
            "PUT", f"{url}{AR}/status?enabled=false", headers={"authorization": "Bearer admin"}
        )
        assert allowed.json() == {"enabled": False}
    assert (f"{AR}/status", True) in seen
    assert (f"{AR}/status", False) in seen
    mutating = {r.path for r in autorecovery_routes(_service_stub()) if r.mutating}
    assert mutating == {f"{AR}/{p}" for p in ("trigger_audit", "lost_bookie_recovery_delay", "status",
                                             "decommission", "bookie")}  # fmt: skip


def _service_stub() -> Any:
    class Stub:
        manager = None
        bk = None
        clock = None

    return Stub()


async def test_the_guard_refuses_on_the_head_before_a_body_is_read() -> None:
    """The guard is the routes' head check: a refused caller is answered on its head, the 10 MiB body it
    announced never sent (and never read)."""

    async def guard(request: HttpRequest, route: BookieRoute) -> None:
        if request.header("authorization") != "Bearer admin":
            raise HttpError(401, "Authentication required")

    async with open_cluster(3) as cluster, api(cluster, guard=guard) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            head = f"PUT {AR}/decommission HTTP/1.1\r\nhost: x\r\ncontent-length: {10 << 20}\r\n\r\n"
            await stream.send_all(head.encode())
            with trio.fail_after(10):
                answer = await stream.receive_some(65536)
        assert answer.startswith(b"HTTP/1.1 401 "), answer
