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

Two persistent nodes hold the identity of the cluster and of its bookies (BookKeeper's layout):
``/ledgers/INSTANCEID`` is the cluster's instance id, a random UUID written once, by whoever needs it first
(``initialize-cluster-metadata`` or the first bookie to start); ``/ledgers/cookies/<bookieId>`` is the cookie
a bookie wrote when it first started (:mod:`magnetar.bookkeeper.bookie.cookie`). Deleting a bookie's cookie
is part of forgetting it (``magnetar bookie --format``, decommissioning).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.bookkeeper.metadata.api import BadVersionError, GetResult, MetadataStore, join

AVAILABLE_PATH = "/ledgers/available"
READONLY = "readonly"
READONLY_PATH = "/ledgers/available/readonly"
COOKIES_PATH = "/ledgers/cookies"
INSTANCE_ID_PATH = "/ledgers/INSTANCEID"


def writable_path(bookie_id: str) -> str:
    return join(AVAILABLE_PATH, bookie_id)


def readonly_path(bookie_id: str) -> str:
    return join(READONLY_PATH, bookie_id)


def cookie_path(bookie_id: str) -> str:
    return join(COOKIES_PATH, bookie_id)


async def read_instance_id(store: MetadataStore) -> str | None:
    """The cluster's instance id, or None if nobody has created it yet."""
    result = await store.get(INSTANCE_ID_PATH)
    return None if result is None else result.value.decode()


async def ensure_instance_id(
    store: MetadataStore, new_id: Callable[[], str] = lambda: str(uuid.uuid4())
) -> str:
    """The cluster's instance id, created (``new_id()``) if it does not exist yet; a racing creator wins."""
    existing = await read_instance_id(store)
    if existing is not None:
        return existing
    candidate = new_id()
    try:
        await store.put(INSTANCE_ID_PATH, candidate.encode(), -1)
    except BadVersionError:
        created = await read_instance_id(store)
        if created is None:  # created and deleted meanwhile: nobody does that but an operator
            raise
        return created
    return candidate


async def read_cookie(store: MetadataStore, bookie_id: str) -> GetResult | None:
    """The stored cookie of ``bookie_id`` with its version (for a compare-and-set), or None."""
    return await store.get(cookie_path(bookie_id))


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
