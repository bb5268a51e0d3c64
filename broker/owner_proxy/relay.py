"""One proxied session: the client's WebSocket on this broker, relayed to an upstream session on the owner,
which it follows when the topic moves.

Two tasks per session. The *client reader* classifies each client frame
(:mod:`magnetar.broker.protocols.relay_tracking`) and sends it to
the current upstream session, or - while there is none - holds it in a bounded buffer (a producer's message
that finds the buffer full is answered with an error; any other frame waits for room; pull-mode permits are
counted, not held). The *upstream loop* relays the owner's frames to the client; when the upstream session
ends it answers what the tracker says is owed (the producer's unanswered messages), then - unless the owner
ended the session for good (1000 after an unsubscribe, a 4xxx session error) - looks the topic up again
through the broker's own lookup, reconnects with a doubling back-off bounded by
``ws_proxy_reconnect_backoff_max_ms``, sends the re-granted permits and the buffered frames in order, and
goes on. If ``ws_proxy_reconnect_deadline_ms`` passes first, the client's session is closed with 1001 so
the client looks the topic up itself.

Ordering: the upstream loop marks the session disconnected and collects the owed answers in one step (no
checkpoint between), and the client reader checks for an upstream session and registers a request in one
step; so every forwarded request is either answered by the owner or owed by the tracker, exactly once.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import trio

from magnetar.bookkeeper.runtime.http import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    WebSocketClosed,
    WsClient,
    WsClosed,
    WsRejected,
)
from magnetar.broker.owner_proxy.metrics import ProxyCounters
from magnetar.broker.protocols.relay_tracking import FrameKind, Tracker

if TYPE_CHECKING:
    from magnetar.broker.owner_proxy.host import RelaySettings

log = logging.getLogger(__name__)

RECONNECTING_CODES = frozenset({1001, 1006, 1011, 1012, 1013, 1014})
"""WsClient close codes after which the proxy follows the topic: going away (unload, shedding, split,
shutdown), a dropped connection, a server error or restart. Any other code ends the client's session too."""

Connect = Callable[[dict[str, str]], Awaitable[WsClient]]
"""Open a new upstream session (looking the topic up first), with these query overrides; one attempt."""


class ClientSide(Protocol):
    """What the relay uses of the client's session: the broker's server-side WebSocket, or - for one
    partition of a partitioned topic - the fan-out's port (:class:`.fanout.PartitionPort`). Receiving raises
    ``WebSocketClosed`` once the client is gone."""

    @property
    def closed(self) -> bool: ...

    async def receive_batch(self) -> list[str | bytes]: ...

    async def send_many(self, messages: Sequence[bytes], *, text: bool) -> None: ...

    async def send_text(self, text: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None: ...


class GaveUp(Exception):
    """The topic's owner could not be reached before the deadline."""


FINAL_STATUSES = frozenset({400, 401, 403, 404, 412})
"""Refusals of an upstream session that retrying cannot cure."""
OPEN_FINAL_STATUSES = FINAL_STATUSES | {409, 429}
"""The same when the client's session is being opened: a conflict (a busy producer name, an exclusive
subscription taken) and a refusal for too many connections or requests are the client's answer too - it
hears them at once and backs off itself, instead of waiting for the proxy's retries to give up. Once the
session runs, a 409 or 429 after a move is retried: the session's previous owner may still hold the
subscription for a moment, and the session is already counted."""


async def connect_with_retry(
    connect: Connect,
    overrides: Callable[[], dict[str, str]],
    settings: RelaySettings,
    what: str,
    deadline: float | None = None,
    final_statuses: frozenset[int] = FINAL_STATUSES,
) -> WsClient:
    """Attempts until one succeeds or ``deadline`` (trio time; default: ``ws_proxy_reconnect_deadline_ms``
    from now) passes (:class:`GaveUp`). A refusal that retrying cannot cure (``final_statuses``) is raised
    at once."""
    if deadline is None:
        deadline = trio.current_time() + settings.ws_proxy_reconnect_deadline_ms / 1000
    backoff_s = settings.ws_proxy_reconnect_backoff_initial_ms / 1000
    last = "no attempt"
    while True:
        try:
            with trio.fail_after(settings.ws_proxy_connect_timeout_ms / 1000):
                return await connect(overrides())
        except WsRejected as exc:
            if exc.status in final_statuses:
                raise
            last = f"{exc.status} {exc.reason}"
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        except LookupFailed as exc:
            last = str(exc)
        if trio.current_time() + backoff_s > deadline:
            raise GaveUp(f"{what}: the topic's owner could not be reached ({last})")
        await trio.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, settings.ws_proxy_reconnect_backoff_max_ms / 1000)


class LookupFailed(Exception):
    """The broker's lookup could not name an owner now (e.g. 503 while an owner's session expires)."""


class Relay:
    def __init__(
        self,
        ws: ClientSide,
        upstream: WsClient,
        tracker: Tracker,
        connect: Connect,
        settings: RelaySettings,
        topic: str,
        counters: ProxyCounters | None = None,
    ) -> None:
        self._ws = ws
        self._upstream: WsClient | None = upstream
        self._tracker = tracker
        self._connect = connect
        self._settings = settings
        self._topic = topic
        self._buffer: deque[str | bytes] = deque()
        self._buffer_bytes = 0
        self._changed = trio.Event()
        """Set (and replaced) when an answer came, the buffer drained or an upstream session opened."""
        self._close: tuple[int, str] = (CLOSE_NORMAL, "")
        self.counters = counters if counters is not None else ProxyCounters()
        """Shared by the proxy's sessions (:mod:`.metrics`); a relay of its own by default."""
        self.moves = 0

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._client_reader, nursery.cancel_scope)
                nursery.start_soon(self._upstream_loop, nursery.cancel_scope)
        finally:  # also when cancelled from outside: the upstream session never outlives the relay
            upstream, self._upstream = self._upstream, None
            with trio.CancelScope(shield=True):
                if upstream is not None:
                    await upstream.aclose()
                if not self._ws.closed:
                    await self._ws.close(*self._close)

    # -- client -> owner ----------------------------------------------------------------------------

    async def _client_reader(self, scope: trio.CancelScope) -> None:
        try:
            while True:
                await self._from_client(await self._ws.receive_batch())
        except WebSocketClosed:
            scope.cancel()  # the client went away: end the upstream session too

    async def _from_client(self, batch: list[str | bytes]) -> None:
        """Forward a received chunk's frames in one write (or buffer them while there is no upstream)."""
        tracker = self._tracker
        out: list[str | bytes] = []
        target: WsClient | None = None
        for message in batch:
            kind = tracker.on_client(message)
            while True:
                upstream = self._upstream
                if upstream is not None:
                    if (
                        kind is FrameKind.PUBLISH
                        and tracker.pending >= self._settings.ws_proxy_pending_messages_max
                    ):
                        await self._send(target, out)
                        out = []
                        await self._changed.wait()
                        continue
                    # registered and queued with no checkpoint in between: if this upstream session ends
                    # before the write, the upstream loop answers these too (see the module's docstring)
                    tracker.on_forward(message)
                    out.append(message)
                    target = upstream
                    break
                out = []  # written to a session that ended meanwhile: already answered as owed
                if await self._hold(kind, message):
                    break
        await self._send(target, out)

    async def _send(self, upstream: WsClient | None, messages: list[str | bytes]) -> None:
        if upstream is None or not messages:
            return
        self.counters.frames_to_owner += len(messages)
        # a failed write: the upstream loop sees the end and answers what is owed, these included
        with contextlib.suppress(WsClosed):
            await upstream.send_many(messages)

    async def _hold(self, kind: FrameKind, message: str | bytes) -> bool:
        """No upstream session now: buffer the frame, or answer it; False when it must wait for room."""
        if kind is FrameKind.PERMIT:
            return True  # counted by the tracker, granted again to the next upstream session
        size = len(message)
        if (
            len(self._buffer) < self._settings.ws_proxy_buffer_messages_max
            and self._buffer_bytes + size <= self._settings.ws_proxy_buffer_bytes_max
        ):
            self._buffer.append(message)
            self._buffer_bytes += size
            return True
        answer = self._tracker.refused(
            message, f"{self._topic} is moving to another broker and the proxy's buffer is full"
        )
        if answer is not None:
            self.counters.failed_back += 1
            await self._to_client([answer])
            return True
        await self._changed.wait()
        return False

    # -- owner -> client ----------------------------------------------------------------------------

    async def _upstream_loop(self, scope: trio.CancelScope) -> None:
        try:
            await self._follow(scope)
        except WebSocketClosed:
            scope.cancel()  # the client went away

    async def _follow(self, scope: trio.CancelScope) -> None:
        upstream = self._upstream
        assert upstream is not None
        while True:
            code, reason = await self._pump(upstream)
            if code not in RECONNECTING_CODES:
                self._close = (code, reason)
                scope.cancel()
                return
            previous = upstream.peer
            try:
                upstream = await self._reconnect(reason)
            except (GaveUp, WsRejected) as exc:
                log.warning("proxy: %s: giving the session up: %s", self._topic, exc)
                self.counters.gave_up += 1
                self._close = _gave_up(exc)
                scope.cancel()
                return
            self.moves += 1
            self.counters.moves += 1
            log.info("proxy: %s moved from %s to %s (owner closed: %s %s)", self._topic, previous,
                     upstream.peer, code, reason)  # fmt: skip

    async def _pump(self, upstream: WsClient) -> tuple[int, str]:
        """Relay until the upstream session ends; then answer what is owed. Returns its close code."""
        try:
            while True:
                batch = await upstream.receive_batch()
                for message in batch:
                    self._tracker.on_upstream(message)
                self._wake()
                await self._to_client(batch)
        except WsClosed as exc:
            code, reason = exc.code, exc.reason
        # no checkpoint from here to the owed answers: see the module's docstring
        self._upstream = None
        owed = self._tracker.lost(
            f"Outcome unknown: the session with the topic's owner ended ({code} {reason})"
        )
        await upstream.aclose()
        if owed:
            self.counters.failed_back += len(owed)
            log.info(
                "proxy: %s: %d requests without an answer failed back to the client", self._topic, len(owed)
            )
            await self._to_client(owed)
        return code, reason

    async def _reconnect(self, reason: str) -> WsClient:
        deadline = trio.current_time() + self._settings.ws_proxy_reconnect_deadline_ms / 1000
        while True:
            upstream = await connect_with_retry(
                self._connect, self._tracker.query_overrides, self._settings, self._topic, deadline
            )
            try:
                for frame in self._tracker.regrant():
                    await upstream.send(frame)
                while self._buffer:
                    held = list(self._buffer)
                    self._buffer.clear()
                    self._buffer_bytes = 0
                    for message in held:
                        self._tracker.on_forward(message)
                    self.counters.frames_to_owner += len(held)
                    await upstream.send_many(held)
                    self._wake()
            except WsClosed:
                # lost again while flushing: answer what was forwarded, try again (within the same deadline)
                owed = self._tracker.lost(f"Outcome unknown: {self._topic} moved again")
                self.counters.failed_back += len(owed)
                await self._to_client(owed)
                await upstream.aclose()
                continue
            self._upstream = upstream  # no checkpoint since the buffer was found empty
            self._wake()
            return upstream

    async def _to_client(self, messages: list[str | bytes]) -> None:
        self.counters.frames_to_client += len(messages)
        await send_frames(self._ws, messages)


async def send_frames(ws: ClientSide, messages: Sequence[str | bytes]) -> None:
    """Text and binary frames to the client in order: one write when they are all of one kind."""
    texts = [m.encode() for m in messages if isinstance(m, str)]
    if len(texts) == len(messages):
        await ws.send_many(texts, text=True)
    elif not texts:
        await ws.send_many([m for m in messages if isinstance(m, bytes)], text=False)
    else:
        for message in messages:
            if isinstance(message, str):
                await ws.send_text(message)
            else:
                await ws.send_bytes(message)


REFUSED_CREDENTIALS = frozenset({401, 403})
"""The new owner refused the client's own credentials (forwarded: :mod:`.upstream`), e.g. a token that
expired since the session was opened."""


def _gave_up(exc: GaveUp | WsRejected) -> tuple[int, str]:
    """How the client's session ends when the topic's new owner could not be reached or refused it. A refusal
    of the client's credentials is 1008 with the owner's reason: looking the topic up again (1001) would not
    help, the client needs a valid token."""
    if isinstance(exc, WsRejected) and exc.status in REFUSED_CREDENTIALS:
        return CLOSE_POLICY_VIOLATION, _close_reason(
            f"Refused after the topic moved: {exc.status} {exc.reason}"
        )
    return CLOSE_GOING_AWAY, _close_reason(f"Topic owner unreachable: {exc}")


def _close_reason(text: str) -> str:
    return text.encode()[:120].decode(errors="ignore")
