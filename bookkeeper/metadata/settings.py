"""Settings of the metadata-store backends (the named limits of :mod:`.zk_store` and friends).

Process settings (broker, bookie, standalone) carry these under their own names and build one
:class:`MetadataStoreSettings` to pass to :func:`~.factory.open_metadata_store`. Defaults follow Pulsar:
``metadataStoreSessionTimeoutMillis`` = 30 s and ``metadataStoreOperationTimeoutSeconds`` = 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetadataStoreSettings:
    session_timeout_ms: int = 30_000
    """ZooKeeper session timeout asked of the server (it clamps it to its min/max session timeout)."""

    operation_timeout_ms: int = 30_000
    """Bound on one ZooKeeper request, and on the first connection when the store opens."""

    zk_blocking_calls_max: int = 8
    """Worker threads one ZooKeeper store may occupy with blocking kazoo calls at once."""

    zk_reconnect_delay_max_ms: int = 1_000
    """Longest back-off between two attempts to reach a ZooKeeper server after the connection dropped."""

    def __post_init__(self) -> None:
        for name in (
            "session_timeout_ms",
            "operation_timeout_ms",
            "zk_blocking_calls_max",
            "zk_reconnect_delay_max_ms",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
