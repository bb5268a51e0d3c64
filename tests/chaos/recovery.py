"""AutoRecovery in the failure suite: asking a live bookie's REST API about the cluster, destroying bookies.

A destroyed bookie is gone for good: SIGKILLed, its data directory wiped, never restarted (a lost disk or
machine). The cluster is *healed* of it once no ledger's metadata names it and no ledger is marked
under-replicated (``/api/v1/ledger/list?print_metadata=true`` and
``/api/v1/autorecovery/list_under_replicated_ledger`` of any live bookie).
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from typing import Any

import trio

from magnetar.admin.processes.dev_cluster import DevCluster


def bookie_http(cluster: DevCluster, name: str) -> str:
    return f"http://127.0.0.1:{cluster.ports.bookies[cluster.bookie_names.index(name)]['http']}"


def request(url: str, method: str = "GET", body: Any = None, timeout_s: float = 10.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    call = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(call, timeout=timeout_s) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


class ClusterView:
    """Questions about the cluster, asked of whichever listed bookie answers."""

    def __init__(self, cluster: DevCluster) -> None:
        self.cluster = cluster
        self.destroyed: set[str] = set()

    def live(self) -> list[str]:
        running = [n for n in self.cluster.bookie_names if n in self.cluster.processes]
        return [n for n in running if n not in self.destroyed and self.cluster.processes[n].running]

    async def get(self, path: str) -> tuple[int, Any]:
        last: Exception | None = None
        for name in self.live():
            try:
                return await trio.to_thread.run_sync(request, bookie_http(self.cluster, name) + path)
            except OSError as exc:
                last = exc
        raise AssertionError(f"no live bookie answered {path}: {last}")

    async def put(self, path: str, body: Any = None) -> tuple[int, Any]:
        url = bookie_http(self.cluster, self.live()[0]) + path
        return await trio.to_thread.run_sync(lambda: request(url, "PUT", body))

    async def ledgers(self) -> dict[int, dict[str, Any]]:
        status, found = await self.get("/api/v1/ledger/list?print_metadata=true")
        assert status == 200, found
        return {int(k): v for k, v in found.items()}

    async def marks(self) -> dict[int, list[str]]:
        status, found = await self.get(
            "/api/v1/autorecovery/list_under_replicated_ledger?printmissingreplica"
        )
        return {} if status == 404 else {int(k): v for k, v in found.items()}

    async def ledgers_naming(self, bookie_id: str) -> list[int]:
        return sorted(
            ledger_id
            for ledger_id, md in (await self.ledgers()).items()
            if any(bookie_id in members for members in md["allEnsembles"].values())
        )

    async def wait_healed(self, bookie_id: str, timeout_s: float) -> float:
        """Until no ledger names ``bookie_id`` and nothing is marked; returns how long it took."""
        started = trio.current_time()
        with trio.fail_after(timeout_s):
            while await self.ledgers_naming(bookie_id) or await self.marks():
                await trio.sleep(0.5)
        return trio.current_time() - started

    async def destroy(self, name: str) -> None:
        """SIGKILL the bookie and wipe its data directory; it is never restarted."""
        self.destroyed.add(name)
        await self.cluster.kill(name)
        await trio.to_thread.run_sync(lambda: shutil.rmtree(self.cluster.data_dir / name, ignore_errors=True))
