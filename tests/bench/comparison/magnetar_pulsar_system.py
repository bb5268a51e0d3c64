"""Magnetar's binary port (Pulsar's binary protocol) measured with Apache's ``pulsar-client``:
``magnetar-standalone-pulsar`` and ``magnetar-cluster-pulsar``.

The servers are :class:`~bench.comparison.magnetar_system.MagnetarSystem`'s (standalone, or ZooKeeper + 3
bookies + 1 broker with E=3 W=3 A=2), started and stopped the same way; the client is
:class:`~bench.comparison.pulsar_client.PulsarClientDriver`, the one pulsar-lite's row uses, pointed at the
broker's ``pulsar://`` URL from its ready document. So these rows and pulsar-lite's differ by the server only.
"""

from __future__ import annotations

from pathlib import Path

from bench.comparison.magnetar_system import MagnetarSystem
from bench.comparison.pulsar_client import CONSUME_MODE, PulsarClientDriver, client_missing, client_version


class MagnetarPulsarSystem(PulsarClientDriver, MagnetarSystem):
    """Lifecycle from :class:`MagnetarSystem`, publisher and consumer from :class:`PulsarClientDriver`."""

    def __init__(self, name: str, cluster: bool, window: int) -> None:
        MagnetarSystem.__init__(self, name, cluster)
        PulsarClientDriver.__init__(self, window)
        self.consume_mode = CONSUME_MODE

    def available(self) -> str | None:
        return client_missing() or MagnetarSystem.available(self)

    def versions(self) -> dict[str, str]:
        versions = MagnetarSystem.versions(self)
        versions["transport"] = client_version()
        return versions

    def start(self, workdir: Path) -> None:
        MagnetarSystem.start(self, workdir)
        self.service_url = self.broker_url
        self.how += f"; client pulsar-client at {self.broker_url}"
