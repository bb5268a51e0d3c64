"""The settings of ``magnetar standalone``: its own, and the whole settings of its broker and of its bookies.

:class:`StandaloneSettings` holds a :class:`~magnetar.broker.settings.BrokerSettings` (``broker``) and a
:class:`~.bookie_settings.BookieSettings` (``bookie``, the settings every bookie shares),
so every broker and bookie setting is a standalone setting too, reached as
:mod:`magnetar.admin.processes.config` describes for a process with
:class:`~magnetar.admin.processes.config.Parts`: by its own name, flat, as in a broker's or a bookie's config
file and environment (``retention_check_interval_s = 10``, ``MAGNETAR_GC__GC_WAIT_TIME_S=60``, a
``[storage_engine]`` table; a name both have, such as ``authentication_enabled``, reaches both), or in the
``[broker]`` / ``[bookie]`` table (``MAGNETAR_BROKER__<NAME>``, ``MAGNETAR_BOOKIE__GC__<NAME>``) for one of
them only.

The standalone sets some of its parts' settings itself (:data:`SET_BY_STANDALONE`): where the metadata is
(RocksDB under ``data_dir``), the broker's port, address and replication quorums (its own ``http_port``,
``bind_address``, ``ensemble_size``...), each bookie's directory and port (``data_dir/bookie-<i>``,
``bookie_port + i``, on 127.0.0.1, disk storage). After validation :attr:`StandaloneSettings.broker` and
:attr:`StandaloneSettings.bookie` hold the effective settings of the broker and of bookie 0
(:meth:`StandaloneSettings.bookie_settings` gives bookie ``i``).

Defaults sized for one machine (:data:`STANDALONE_BOOKIE_DEFAULTS`). A bookie's own defaults are
BookKeeper's, made for a dedicated server: 1 GiB entry logs, 2 GiB journal files (BookKeeper keeps 5 old
ones), garbage collection every 10 minutes, compaction hourly and daily. On a laptop that keeps gigabytes
for nothing - one half-written 1 GiB entry log is never collected while it is being written, so deleting
every topic freed nothing - so the standalone's bookies default to:

* ``entry_log_bytes_max`` 64 MiB: logs are sealed (and collectable) after 64 MiB rather than 1 GiB;
* ``journal_file_bytes_max`` 16 MiB, ``journal_max_backups`` 0, ``journal_preallocate_bytes`` 4 MiB:
  journal files are deleted whole once a checkpoint has passed them (replay starts at the checkpoint's mark,
  so nothing reads them again), so the journal keeps about the file being written, 16-20 MiB, instead of
  up to 12 GiB (no throughput cost measured: a roll every 16 MiB is a file creation and two syncs);
* ``gc_wait_time_s`` 60: a deleted topic's space comes back within about a minute of its ledgers' deletion;
* ``active_log_roll_garbage_bytes`` 4 MiB: a GC pass seals the entry log being written once 4 MiB of it
  belong to deleted ledgers, so that space comes back too without waiting for the log to fill up;
* ``minor_compaction_interval_s`` 300, ``major_compaction_interval_s`` 1800: logs in which retention left
  a little live data among deleted ledgers are compacted within minutes, not hours.

The broker's default that differs is ``publish_inflight_entries_max`` 1 (see its docstring in
:class:`~magnetar.broker.settings.BrokerSettings`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.config import Parts
from magnetar.bookkeeper.protocol import SizeLimit, check_size_chain
from magnetar.bookkeeper.runtime.http import HttpListenSettings
from magnetar.broker.settings import BrokerServicePortSettings, BrokerSettings

MIB = 1024 * 1024

STANDALONE_BROKER_DEFAULTS: dict[str, Any] = {
    "publish_inflight_entries_max": 1,
    # Entries of one topic in flight to the bookies (the broker's own default is 4). The bookies of a
    # standalone share the broker's process and event loop, so pipelining more entries buys no parallelism
    # while bigger batches save CPU per message: on a 2-core machine 1 gave both a lower publish p99 at
    # 5,000 msgs/s (2.4-3.8 ms against 3.2-10.4) and more throughput (60,000 against 55,000 msgs/s).
}
STANDALONE_BOOKIE_DEFAULTS: dict[str, Any] = {
    "storage_engine": {
        "entry_log_bytes_max": 64 * MIB,
        "journal_file_bytes_max": 16 * MIB,
        "journal_max_backups": 0,
        "journal_preallocate_bytes": 4 * MIB,
    },
    "gc": {
        "gc_wait_time_s": 60.0,
        "active_log_roll_garbage_bytes": 4 * MIB,
        "minor_compaction_interval_s": 300.0,
        "major_compaction_interval_s": 1800.0,
    },
}
"""The standalone's bookies' defaults (the module docstring says why)."""

METADATA = "RocksDB under data_dir (the standalone's metadata store)"
SET_BY_STANDALONE: dict[str, dict[str, str]] = {
    "broker": {
        "metadata_url": METADATA,
        "http_port": "the standalone's http_port",
        "broker_service_port": "the standalone's broker_service_port",
        "broker_service_port_tls": "the standalone's broker_service_port_tls",
        "bind_address": "the standalone's bind_address",
        "ensemble_size": "the standalone's ensemble_size (default from bookies)",
        "write_quorum": "the standalone's write_quorum (default from bookies)",
        "ack_quorum": "the standalone's ack_quorum (default from bookies)",
    },
    "bookie": {
        "metadata_url": METADATA,
        "data_dir": "data_dir/bookie-<i> for bookie i",
        "journal_dir": "data_dir/bookie-<i>/journal for bookie i",
        "storage": "always the disk engine",
        "port": "bookie_port + i for bookie i",
        "bind_address": "always 127.0.0.1",
        "advertised_address": "always 127.0.0.1 (bookie ids 127.0.0.1:<port>)",
        "http_port": "none: the bookies' HTTP API is served on the standalone's http_port",
        "port_file": "none: the standalone prints its own ready line",
    },
}
"""Settings of the parts that the standalone sets itself -> what it sets them to."""


def _deep_merge(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    merged = dict(defaults)  # the caller passes a copy
    for name, value in given.items():
        below = merged.get(name)
        if isinstance(value, dict) and isinstance(below, dict):
            merged[name] = _deep_merge(below, value)
        else:
            merged[name] = value
    return merged


class StandaloneSettings(BaseSettings, HttpListenSettings, BrokerServicePortSettings):
    model_config = SettingsConfigDict(
        env_prefix="MAGNETAR_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )
    PARTS: ClassVar[Parts] = Parts(
        kind="standalone",
        models={"broker": BrokerSettings, "bookie": BookieSettings},
        defaults={"broker": STANDALONE_BROKER_DEFAULTS, "bookie": STANDALONE_BOOKIE_DEFAULTS},
        set_by_process=SET_BY_STANDALONE,
    )

    data_dir: Path = Path("data")
    """Everything is stored here: ``metadata`` (RocksDB) and ``bookie-<i>`` for bookie ``i``."""
    # http_port (WebSocket API, admin REST API, /metrics and the bookies' HTTP API) and bind_address:
    # HttpListenSettings', as the broker's, which the standalone sets from them
    bookies: Annotated[int, Field(ge=1, le=9)] = 1
    bookie_port: Annotated[int, Field(ge=1, le=65526)] = 3181
    """Bookie ``i`` listens on ``127.0.0.1:<bookie_port + i>``; keep it stable across restarts."""
    ensemble_size: Annotated[int, Field(ge=1)] | None = None
    """Default from ``bookies``: 1/1/1 for one bookie, 2/2/2 for two, 3/3/2 for three or more."""
    write_quorum: Annotated[int, Field(ge=1)] | None = None
    ack_quorum: Annotated[int, Field(ge=1)] | None = None

    broker: BrokerSettings = Field(
        default_factory=lambda: BrokerSettings.model_validate(STANDALONE_BROKER_DEFAULTS)
    )
    """The broker's settings (effective after validation: what the standalone sets is filled in)."""
    bookie: BookieSettings = Field(
        default_factory=lambda: BookieSettings.model_validate(STANDALONE_BOOKIE_DEFAULTS)
    )
    """The bookies' settings, as bookie 0 runs them (:meth:`bookie_settings` for the others)."""

    @model_validator(mode="before")
    @classmethod
    def _standalone_defaults(cls, data: Any) -> Any:
        """The standalone's defaults for its parts' settings, under whatever was given for them."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for part, defaults in (
            ("broker", STANDALONE_BROKER_DEFAULTS),
            ("bookie", STANDALONE_BOOKIE_DEFAULTS),
        ):
            given = data.get(part)
            if isinstance(given, dict):
                data[part] = _deep_merge(copy.deepcopy(dict(defaults)), given)
            elif given is None:
                data[part] = copy.deepcopy(dict(defaults))
        return data

    @model_validator(mode="after")
    def _set_parts(self) -> Self:
        """Check the quorums, then fill in the parts' settings the standalone sets itself."""
        e, w, a = self.quorums()
        if not a <= w <= e <= self.bookies:
            raise ValueError(f"need ack_quorum <= write_quorum <= ensemble_size <= bookies, got {a}/{w}/{e}")
        metadata_url = f"rocksdb://{self.data_dir.resolve() / 'metadata'}"
        broker = BrokerSettings.model_validate(
            {
                **self.broker.model_dump(),
                "metadata_url": metadata_url,
                "http_port": self.http_port,
                "broker_service_port": self.broker_service_port,
                "broker_service_port_tls": self.broker_service_port_tls,
                "bind_address": self.bind_address,
                "ensemble_size": e,
                "write_quorum": w,
                "ack_quorum": a,
            }
        )
        bookie = BookieSettings.model_validate(
            {
                **self.bookie.model_dump(),
                "metadata_url": metadata_url,
                "data_dir": self.data_dir / "bookie-0",
                "journal_dir": None,
                "storage": "disk",
                "port": self.bookie_port,
                "bind_address": "127.0.0.1",
                "advertised_address": "127.0.0.1",
                "http_port": None,
                "port_file": None,
            }
        )
        check_size_chain(
            **broker.size_chain(),
            bookie_entry=SizeLimit("storage_engine.entry_bytes_max", bookie.storage_engine.entry_bytes_max),
        )
        check_size_chain(
            entry_payload=SizeLimit("entry_payload_bytes_max", broker.client.entry_payload_bytes_max),
            bookie_frames=(SizeLimit("frame_bytes_max", bookie.frame_bytes_max),),
        )
        # Frozen model: the effective parts replace the given ones once, here, during validation.
        object.__setattr__(self, "broker", broker)
        object.__setattr__(self, "bookie", bookie)
        return self

    def quorums(self) -> tuple[int, int, int]:
        default = {1: (1, 1, 1), 2: (2, 2, 2)}.get(self.bookies, (3, 3, 2))
        return (
            self.ensemble_size or default[0],
            self.write_quorum or default[1],
            self.ack_quorum or default[2],
        )

    def broker_settings(self) -> BrokerSettings:
        return self.broker

    def bookie_settings(self, index: int) -> BookieSettings:
        """Bookie ``index``'s settings: the shared ones with its own directory and port."""
        return self.bookie.model_copy(
            update={"data_dir": self.data_dir / f"bookie-{index}", "port": self.bookie_port + index}
        )
