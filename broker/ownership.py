"""Namespace-bundle ownership through ephemeral nodes (Pulsar's ``OwnershipCache``, modular load manager).

A broker owns a bundle while its ephemeral node ``/namespace/<tenant>/<ns>/<0xLOW_0xHIGH>`` exists; the node's
value says how to reach the owner (Pulsar's ``NamespaceEphemeralData``). Acquiring is a create that must not
find the node; whoever loses the race reads the winner. Brokers also register themselves under
``/loadbalance/brokers/<id>`` so any broker can list the live ones.

A lost metadata session deletes the ephemeral nodes, so another broker may take the bundles at once: the
broker that lost its session must stop serving them immediately (``on_lost``), before it can write anything
more. Its managed ledgers would be fenced anyway - bookie fencing and metadata CAS stop a stale owner - but
dropping them at once turns that into a clean redirect for clients instead of write errors.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass

import trio

from magnetar.bookkeeper.metadata import (
    BadVersionError,
    MetadataStore,
    NotFoundError,
    SessionEvent,
)

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"
BROKERS_ROOT = "/loadbalance/brokers"


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """Pulsar's ``NamespaceEphemeralData``: how clients reach the owning broker."""

    httpUrl: str
    httpUrlTls: str = ""
    nativeUrl: str = ""
    nativeUrlTls: str = ""
    disabled: bool = False

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> OwnerInfo:
        data = json.loads(raw)
        return cls(
            httpUrl=str(data.get("httpUrl", "")),
            httpUrlTls=str(data.get("httpUrlTls", "")),
            nativeUrl=str(data.get("nativeUrl", "")),
            nativeUrlTls=str(data.get("nativeUrlTls", "")),
            disabled=bool(data.get("disabled", False)),
        )


def bundle_path(namespace: str, bundle: str) -> str:
    return f"{OWNERSHIP_ROOT}/{namespace}/{bundle}"


class OwnershipManager:
    def __init__(
        self,
        store: MetadataStore,
        broker_id: str,
        me: OwnerInfo,
        on_lost: Callable[[set[tuple[str, str]]], None],
    ) -> None:
        self._store = store
        self.broker_id = broker_id
        self.me = me
        self._on_lost = on_lost
        self._owned: set[tuple[str, str]] = set()
        self._acquire_lock = trio.Lock()
        self._unregister = store.register_session_listener(self._on_session_event)
        self._load: dict[str, object] = {}
        self._reregister_send, self._reregister_recv = trio.open_memory_channel[None](1)

    @property
    def owned(self) -> set[tuple[str, str]]:
        return set(self._owned)

    def owns(self, namespace: str, bundle: str) -> bool:
        return (namespace, bundle) in self._owned

    async def register_broker(self, load: dict[str, object] | None = None) -> None:
        self._load = dict(load or {})
        value = json.dumps({"httpUrl": self.me.httpUrl, **self._load}).encode()
        await self._store.put(f"{BROKERS_ROOT}/{self.broker_id}", value, None, ephemeral=True)

    async def run(self) -> None:
        """Re-register the broker after a new metadata session (its ephemeral node died with the old one)."""
        async for _ in self._reregister_recv:
            try:
                await self.register_broker(self._load)
                log.info("broker %s registered again after a new metadata session", self.broker_id)
            except Exception as exc:  # the store reports its own failure kinds; retry on the next event
                log.error("broker %s could not re-register: %s", self.broker_id, exc)

    async def active_brokers(self) -> list[str]:
        return await self._store.get_children(BROKERS_ROOT)

    async def get_owner(self, namespace: str, bundle: str) -> OwnerInfo | None:
        if self.owns(namespace, bundle):
            return self.me
        result = await self._store.get(bundle_path(namespace, bundle))
        return None if result is None else OwnerInfo.decode(result.value)

    async def acquire(self, namespace: str, bundle: str) -> OwnerInfo:
        """Own the bundle if nobody does; returns the owner (this broker or the one that won)."""
        async with self._acquire_lock:
            if self.owns(namespace, bundle):
                return self.me
            path = bundle_path(namespace, bundle)
            try:
                await self._store.put(path, self.me.encode(), -1, ephemeral=True)
            except BadVersionError:
                result = await self._store.get(path)
                if result is None:  # the other owner vanished meanwhile; the caller may retry
                    raise
                owner = OwnerInfo.decode(result.value)
                if owner.httpUrl != self.me.httpUrl:
                    return owner
                # A node of ours from an earlier session that has not expired yet: not ours to use.
                log.warning("bundle %s/%s is held by a previous session of this broker", namespace, bundle)
                return owner
            self._owned.add((namespace, bundle))
            log.info("broker %s now owns bundle %s/%s", self.broker_id, namespace, bundle)
            return self.me

    async def release(self, namespace: str, bundle: str) -> None:
        """Give the bundle up (unload): the next lookup lets any broker take it."""
        if (namespace, bundle) not in self._owned:
            return
        self._owned.discard((namespace, bundle))
        with contextlib.suppress(NotFoundError):
            await self._store.delete(bundle_path(namespace, bundle))
        log.info("broker %s released bundle %s/%s", self.broker_id, namespace, bundle)

    async def release_all(self) -> None:
        for namespace, bundle in sorted(self._owned):
            await self.release(namespace, bundle)

    def close(self) -> None:
        self._unregister()

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_REESTABLISHED:
            with contextlib.suppress(trio.WouldBlock):
                self._reregister_send.send_nowait(None)
        if event is SessionEvent.SESSION_LOST and self._owned:
            lost, self._owned = self._owned, set()
            log.error(
                "metadata session lost: broker %s stops serving %d bundles at once", self.broker_id, len(lost)
            )
            self._on_lost(lost)
