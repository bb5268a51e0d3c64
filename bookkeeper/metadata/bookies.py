"""Bookie registration paths and the reader the client uses to find bookies (BookKeeper's
``RegistrationClient``/``RegistrationManager`` layout under ``zkLedgersRootPath``).

A bookie registers itself with an *ephemeral* node named after its bookie id (``host:port``):
``/ledgers/available/<bookieId>`` while writable, ``/ledgers/available/readonly/<bookieId>`` while
read-only. The node vanishes with the bookie's metadata session, so the lists below are the live bookies.
``/ledgers/available/readonly`` itself is a persistent child of ``/ledgers/available`` and is not a bookie.
The node's value is a small JSON document (:class:`BookieServiceInfo`, as BookKeeper's
``BookieServiceInfo``) naming the bookie's endpoints, so that tools can find its HTTP port, and its
properties: ``rack`` is the bookie's rack or zone label (``--rack``), which rack-aware placement spreads
ensembles across (absent: the default rack).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from magnetar.bookkeeper.metadata.api import MetadataStore, join

LEDGERS_ROOT = "/ledgers"
AVAILABLE_PATH = "/ledgers/available"
READONLY = "readonly"
READONLY_PATH = "/ledgers/available/readonly"
COOKIES_PATH = "/ledgers/cookies"


def writable_path(bookie_id: str) -> str:
    return join(AVAILABLE_PATH, bookie_id)


def readonly_path(bookie_id: str) -> str:
    return join(READONLY_PATH, bookie_id)


@dataclass(frozen=True, slots=True)
class BookieLists:
    writable: list[str] = field(default_factory=list)
    """Registered writable bookies, sorted; a bookie also listed read-only (mid-transition) is left out."""
    readonly: list[str] = field(default_factory=list)


async def list_bookies(store: MetadataStore) -> BookieLists:
    readonly = await store.get_children(READONLY_PATH)
    excluded = {READONLY, *readonly}
    writable = [name for name in await store.get_children(AVAILABLE_PATH) if name not in excluded]
    return BookieLists(writable=writable, readonly=readonly)


@dataclass(frozen=True, slots=True)
class BookieServiceInfo:
    bookie_id: str
    host: str
    port: int
    http_port: int | None = None
    readonly: bool = False
    rack: str | None = None

    def to_json(self) -> bytes:
        endpoints: list[dict[str, object]] = [
            {"id": "bookie", "protocol": "bookie-rpc", "host": self.host, "port": self.port}
        ]
        if self.http_port is not None:
            http = {"id": "http-server", "protocol": "http", "host": self.host, "port": self.http_port}
            endpoints.append(http)
        document: dict[str, object] = {
            "bookieId": self.bookie_id,
            "readOnly": self.readonly,
            "endpoints": endpoints,
        }
        if self.rack is not None:
            document["properties"] = {"rack": self.rack}
        return json.dumps(document, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BookieServiceInfo:
        """Parse a registration value; ValueError when it is not one."""
        try:
            document = json.loads(data)
            endpoints = {e["id"]: e for e in document["endpoints"]}
            rpc = endpoints["bookie"]
            http = endpoints.get("http-server")
            return cls(
                bookie_id=str(document["bookieId"]),
                host=str(rpc["host"]),
                port=int(rpc["port"]),
                http_port=None if http is None else int(http["port"]),
                readonly=bool(document.get("readOnly", False)),
                rack=_rack_of(document),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a bookie registration: {data[:200]!r}") from exc


def _rack_of(document: dict[str, object]) -> str | None:
    properties = document.get("properties")
    if isinstance(properties, dict) and isinstance(properties.get("rack"), str):
        return str(properties["rack"])
    return None


async def read_bookie_info(store: MetadataStore, bookie_id: str) -> BookieServiceInfo | None:
    """The registration of ``bookie_id`` (writable or read-only), or None if it is not registered."""
    for path in (writable_path(bookie_id), readonly_path(bookie_id)):
        result = await store.get(path)
        if result is not None:
            return BookieServiceInfo.from_json(result.value)
    return None
