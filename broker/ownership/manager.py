"""Namespace-bundle ownership through ephemeral nodes (Pulsar's ``OwnershipCache``, modular load manager).

A broker owns a bundle while its ephemeral node ``/namespace/<tenant>/<ns>/<0xLOW_0xHIGH>`` exists; the node's
value says how to reach the owner (Pulsar's ``NamespaceEphemeralData``). Acquiring is a create that must not
find the node; whoever loses the race reads the winner. Brokers also register themselves under
``/loadbalance/brokers/<id>`` so any broker can list the live ones.

Metadata outages. The node lives as long as the broker's metadata session, but serving a bundle does not
depend on it: :mod:`.state` (a sans-IO state machine; its docstring holds the safety argument)
decides, and this module carries its decisions out - it feeds it the store's session events, runs the claims
(creating the nodes again after a lost session) and the broker's re-registration, and calls ``on_lost`` with
the bundles to stop serving. A node of this broker's own URL found in the way of a claim or an acquisition
belongs to an earlier session of this very broker (a URL names one live broker): it is deleted and created
again in the current session.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import trio

from magnetar.bookkeeper.metadata import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    SessionEvent,
)
from magnetar.broker.ownership.state import (
    Action,
    Bundle,
    BundleStatus,
    Claim,
    ClaimOutcome,
    GiveUp,
    OwnershipState,
)
from magnetar.broker.wire import (
    AdvertisedListener,
    listeners_from_json,
    listeners_json,
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
    advertisedListeners: tuple[AdvertisedListener, ...] = ()
    """The broker's named listeners (:mod:`.listeners`), stored as Pulsar's name -> URLs map."""

    def encode(self) -> bytes:
        data = asdict(self)
        data["advertisedListeners"] = listeners_json(self.advertisedListeners)
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> OwnerInfo:
        data = json.loads(raw)
        return cls(
            httpUrl=str(data.get("httpUrl", "")),
            httpUrlTls=str(data.get("httpUrlTls", "")),
            nativeUrl=str(data.get("nativeUrl", "")),
            nativeUrlTls=str(data.get("nativeUrlTls", "")),
            disabled=bool(data.get("disabled", False)),
            advertisedListeners=listeners_from_json(data.get("advertisedListeners")),
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
        *,
        serve_without_session_max_s: float = 300.0,
        claim_retry_interval_s: float = 1.0,
    ) -> None:
        self._store = store
        self.broker_id = broker_id
        self.me = me
        self._on_lost = on_lost
        self.state = OwnershipState(
            serve_without_session_max_s=serve_without_session_max_s,
            claim_retry_interval_s=claim_retry_interval_s,
        )
        self._acquire_lock = trio.Lock()
        self._load: dict[str, object] = {}
        self._to_claim: set[Bundle] = set()
        self._register_due = False
        self._wakeup = trio.Event()
        self._claims_done = trio.Event()
        """Set (and replaced) after each round of claims: waiters re-check their bundle."""
        self._unregister = store.register_session_listener(self._on_session_event)

    @property
    def owned(self) -> set[tuple[str, str]]:
        return set(self.state.bundles)

    def owns(self, namespace: str, bundle: str) -> bool:
        return self.state.serves((namespace, bundle))

    async def register_broker(self, load: dict[str, object] | None = None) -> None:
        self._load = dict(load or {})
        me = self.me
        addresses = {"httpUrl": me.httpUrl, "nativeUrl": me.nativeUrl, "nativeUrlTls": me.nativeUrlTls}
        value = json.dumps({**addresses, **self._load}).encode()
        await self._store.put(f"{BROKERS_ROOT}/{self.broker_id}", value, None, ephemeral=True)

    async def run(self) -> None:
        """Carry out the state machine's claims, re-registrations and deadlines until cancelled."""
        while True:
            deadline = self.state.deadline()
            if self._register_due:  # a failed re-registration is tried again at the claims' pace
                retry = trio.current_time() + self.state.claim_retry_interval_s
                deadline = retry if deadline is None else min(deadline, retry)
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            self._apply(self.state.on_tick(trio.current_time()))
            if self._register_due:
                await self._register_again()
            claims, self._to_claim = self._to_claim, set()
            for bundle in sorted(claims):
                outcome, detail = await self._claim(bundle)
                self._apply(self.state.on_claim(bundle, outcome, trio.current_time(), detail))
            if claims:
                self._claims_done.set()
                self._claims_done = trio.Event()

    async def wait_confirmed(self, namespace: str, bundle: str, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until a bundle served unconfirmed is confirmed again or given up;
        whether this broker owns it, confirmed. A topic of an unconfirmed bundle is not loaded here: another
        broker may have taken the bundle, and loading would take the topic back from it."""
        key = (namespace, bundle)
        with trio.move_on_after(timeout_s):
            while key in self.state.unconfirmed:
                await self._claims_done.wait()
        return self.state.bundles.get(key) is BundleStatus.CONFIRMED

    async def active_brokers(self) -> list[str]:
        return await self._store.get_children(BROKERS_ROOT)

    async def live_native_urls(self) -> dict[str, str]:
        """The binary addresses (``pulsar://``, ``pulsar+ssl://``) the live brokers registered, this one's
        included, each with the address a relayed connection to it dials: itself, or for an advertised
        listener's URL the broker's own (internal) URL of the same kind."""
        records: list[dict[str, Any]] = [
            {"nativeUrl": self.me.nativeUrl, "nativeUrlTls": self.me.nativeUrlTls}
        ]
        for broker in await self.active_brokers():
            result = await self._store.get(f"{BROKERS_ROOT}/{broker}")
            if result is None:
                continue
            try:
                data = json.loads(result.value)
            except ValueError:
                continue
            if isinstance(data, dict):
                records.append(data)
        urls: dict[str, str] = {}
        for data in records:
            plain, tls = str(data.get("nativeUrl") or ""), str(data.get("nativeUrlTls") or "")
            for listener in listeners_from_json(data.get("advertisedListeners")):
                urls[listener.url] = plain
                urls[listener.url_tls] = tls
            urls[plain] = plain
            urls[tls] = tls
        return {named: dialled for named, dialled in urls.items() if named and dialled}

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
            epoch = self.state.session_epoch
            owner = await self._create_node((namespace, bundle))
            if owner is not None:
                return owner
            self._apply(self.state.acquired((namespace, bundle), epoch, trio.current_time()))
            log.info("broker %s now owns bundle %s/%s", self.broker_id, namespace, bundle)
            return self.me

    async def release(self, namespace: str, bundle: str) -> None:
        """Give the bundle up (unload): the next lookup lets any broker take it. If the node cannot be
        deleted (the store is unavailable) the bundle stays owned and the error is raised."""
        key = (namespace, bundle)
        if not self.owns(namespace, bundle):
            return
        if self.state.bundles[key] is BundleStatus.CONFIRMED:
            # an unconfirmed bundle's node died with the lost session: the one there now is not ours
            with contextlib.suppress(NotFoundError):
                await self._store.delete(bundle_path(namespace, bundle))
        self.state.released(key)
        log.info("broker %s released bundle %s/%s", self.broker_id, namespace, bundle)

    async def release_all(self) -> None:
        for namespace, bundle in sorted(self.owned):
            await self.release(namespace, bundle)

    def close(self) -> None:
        self._unregister()

    # -- internals -----------------------------------------------------------------------------------

    def _on_session_event(self, event: SessionEvent) -> None:
        self._apply(self.state.on_session_event(event, trio.current_time()))
        self._wakeup.set()  # the deadline may have moved

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, GiveUp):
                log.error(
                    "broker %s stops serving %d bundles: %s (%s)",
                    self.broker_id,
                    len(action.bundles),
                    action.reason,
                    ", ".join(f"{ns}/{b}" for ns, b in sorted(action.bundles)),
                )
                self._on_lost(set(action.bundles))
            elif isinstance(action, Claim):
                self._to_claim |= action.bundles
                self._wakeup.set()
            else:
                self._register_due = True
                self._wakeup.set()

    async def _register_again(self) -> None:
        try:
            await self.register_broker(self._load)
        except (
            MetadataStoreError
        ) as exc:  # the store reports its own failure kinds; retried on the next event
            log.error("broker %s could not re-register: %s", self.broker_id, exc)
            return
        self._register_due = False
        log.info("broker %s registered again after a new metadata session", self.broker_id)

    async def _claim(self, bundle: Bundle) -> tuple[ClaimOutcome, str]:
        """Create the node of a bundle this broker serves unconfirmed."""
        async with self._acquire_lock:
            if bundle not in self.state.unconfirmed:
                return ClaimOutcome.CREATED, ""  # settled meanwhile (released, given up or confirmed)
            try:
                owner = await self._create_node(bundle)
            except (MetadataStoreError, ValueError) as exc:  # ValueError: a node whose value is not JSON
                log.warning("broker %s: claiming bundle %s/%s failed: %s", self.broker_id, *bundle, exc)
                return ClaimOutcome.FAILED, str(exc)
            if owner is not None:
                return ClaimOutcome.HELD_BY_ANOTHER, f"owned by {owner.httpUrl}"
            log.info("broker %s owns bundle %s/%s again in its new session", self.broker_id, *bundle)
            return ClaimOutcome.CREATED, ""

    async def _create_node(self, bundle: Bundle) -> OwnerInfo | None:
        """Create ``bundle``'s node in the current session; the other owner if another broker holds it.

        Raises :class:`MetadataStoreError` when the store fails (or the node is in flux)."""
        path = bundle_path(*bundle)
        for _ in range(_CREATE_ATTEMPTS):
            try:
                await self._store.put(path, self.me.encode(), -1, ephemeral=True)
                return None
            except BadVersionError:
                result = await self._store.get(path)
            if result is None:
                continue  # the holder vanished meanwhile
            owner = OwnerInfo.decode(result.value)
            if owner.httpUrl != self.me.httpUrl:
                return owner
            log.warning(
                "bundle %s/%s is held by an earlier session of broker %s: creating it again",
                *bundle,
                self.me.httpUrl,
            )
            with contextlib.suppress(NotFoundError, BadVersionError):
                await self._store.delete(path, result.stat.version)
        raise BadVersionError(f"{path} kept changing; gave up after {_CREATE_ATTEMPTS} attempts")


_CREATE_ATTEMPTS = 3
"""Creating a bundle's node starts over when its holder vanishes or it is an earlier session's of ours."""
