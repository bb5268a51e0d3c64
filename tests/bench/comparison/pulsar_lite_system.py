"""pulsar-lite (PyPI: a Rust broker speaking Pulsar's binary protocol) with Apache's ``pulsar-client``.

Server: the ``pulsar-lite`` binary shipped in the wheel, ``--addr 127.0.0.1:P --db-path D --log-level
warn``. Durability: RocksDB plus an entry log; its fsync policy is not documented (it survived a kill -9 in a
quick check, docs/upstream.md, peer systems). Client: :mod:`.pulsar_client`, the same driver as Magnetar's
``-pulsar`` rows (its binary port), so those rows and this one differ by the server only.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bench.comparison.processes import ServerProcess, free_port, wait_for_port
from bench.comparison.pulsar_client import PulsarClientDriver, client_missing, client_version

START_TIMEOUT_S = 30.0


def binary_path() -> Path | None:
    spec = importlib.util.find_spec("pulsar_lite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "pulsar-lite"
    return path if path.is_file() else None


class PulsarLiteSystem(PulsarClientDriver):
    durability = "RocksDB + entry log"
    durability_detail = "RocksDB + entry log; fsync policy undocumented (survived kill -9 in a quick check)"

    def __init__(self, name: str, window: int) -> None:
        super().__init__(window)
        self.name = name
        self.port = 0
        self.how = ""
        self._server: ServerProcess | None = None

    def available(self) -> str | None:
        if binary_path() is None:
            return "pulsar-lite is not installed (pip install -e '.[bench]')"
        return client_missing()

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"pulsar-lite": version("pulsar-lite"), "client": client_version()}

    def start(self, workdir: Path) -> None:
        binary = binary_path()
        if binary is None:
            raise RuntimeError("pulsar-lite binary not found")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._server = ServerProcess(
            self.name,
            [str(binary), "--addr", f"127.0.0.1:{self.port}", "--db-path", str(workdir / "db"),
             "--log-level", "warn"],
            workdir / "pulsar-lite.log",
            cwd=workdir,
        )  # fmt: skip
        self._server.start()
        wait_for_port(self._server, self.port, START_TIMEOUT_S)
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.how = "pulsar-lite --addr 127.0.0.1:P --db-path D --log-level warn; client pulsar-client"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
