"""Continuous producers and consumers over the WebSocket API, reporting everything to the :class:`Checker`.

A producer publishes ``rate_per_s`` messages a second with up to ``window`` unacknowledged, each a JSON text
``{"p": name, "s": seq}`` with ``seq`` as the request's ``context``. It connects to the brokers in turn,
following 307 redirects to the owner. An ack ``ok`` is an acknowledged publish; a ``send-error`` or a
session that ends (connection lost, or no ack for ``send_timeout_s`` - then it gives up on the session as a
client's send timeout would) leaves every pending message with an unknown outcome, and it reconnects and
goes on with the next sequence numbers (nothing is resent, so "unknown" stays unknown).

A consumer holds one Exclusive durable subscription (created at the earliest position), acknowledges each
message once it has told the checker, and reconnects whenever its session ends, its subscription is busy
(the previous session is not yet gone), or no message arrived for ``idle_s`` (its broker may be paused or
cut off without the connection ending). A *late* consumer creates its subscription at the start and then
leaves it untouched until ``late`` is set (the drain): it reads everything from the bookies at the end,
after the faults - what a consumer that fell behind, or a new reader of retained data, does.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import cycle

import trio
from chaos.checker import Checker, payload_for

from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsClosed, WsRejected

log = logging.getLogger("chaos.workload")

NAMESPACE = "persistent/public/default"
CONNECT_TIMEOUT_S = 3.0
RETRY_DELAY_S = 0.2
_SESSION_ERRORS = (
    OSError,
    WsClosed,
    WsRejected,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    ValueError,
)


class SessionTimeoutError(Exception):
    pass


@dataclass(frozen=True)
class ProducerSpec:
    name: str
    rate_per_s: float = 50.0
    window: int = 20
    send_timeout_s: float = 8.0


@dataclass
class Stats:
    sessions: dict[str, int] = field(default_factory=dict)
    connect_failures: dict[str, int] = field(default_factory=dict)

    def count(self, table: dict[str, int], name: str) -> None:
        table[name] = table.get(name, 0) + 1


class Workload:
    def __init__(
        self,
        checker: Checker,
        broker_urls: Callable[[], list[str]],
        topic: str,
        producers: list[ProducerSpec],
        *,
        idle_s: float = 4.0,
    ) -> None:
        self.checker = checker
        self.broker_urls = broker_urls
        self.topic = topic
        self.producers = producers
        self.idle_s = idle_s
        self.stats = Stats()
        self.stop_producing = trio.Event()
        self.changed = trio.Event()
        """Set (and replaced) whenever an ack or a delivery arrives: waiters re-check their condition."""
        self.subscribed: dict[str, trio.Event] = {s: trio.Event() for s in checker.subscriptions}

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait (bounded) until ``condition()`` holds after some ack or delivery; False on timeout."""
        with trio.move_on_after(timeout_s):
            while not condition():
                await self.changed.wait()
            return True
        return False

    def _urls(self) -> cycle[str]:
        return cycle(url.replace("http://", "ws://") for url in self.broker_urls())

    # -- producers --------------------------------------------------------------------------------------

    async def run_producer(self, spec: ProducerSpec) -> None:
        state = {"seq": 0}
        urls = self._urls()
        while not self.stop_producing.is_set():
            url = f"{next(urls)}/ws/v2/producer/{NAMESPACE}/{self.topic}"
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    ws = await WsClient.connect(url, timeout_s=CONNECT_TIMEOUT_S)
            except (*_SESSION_ERRORS, trio.TooSlowError):
                self.stats.count(self.stats.connect_failures, spec.name)
                await trio.sleep(RETRY_DELAY_S)
                continue
            self.stats.count(self.stats.sessions, spec.name)
            pending: dict[int, float] = {}
            try:
                await self._producer_session(spec, ws, state, pending)
            except* (*_SESSION_ERRORS, SessionTimeoutError) as group:
                log.info("%s: session via %s ended: %s", spec.name, ws.url, group.exceptions[0])
            finally:
                for seq in sorted(pending):
                    self.checker.failed(spec.name, seq, "session ended before its ack")
                with trio.CancelScope(shield=True):
                    await ws.aclose()

    async def _producer_session(
        self, spec: ProducerSpec, ws: WsClient, state: dict[str, int], pending: dict[int, float]
    ) -> None:
        broker = ws.url.split("/ws/")[0]
        room = trio.Event()
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                nonlocal room
                while not self.stop_producing.is_set():
                    while len(pending) >= spec.window:
                        room = trio.Event()
                        await room.wait()
                    seq = state["seq"]
                    state["seq"] += 1
                    text = payload_for(spec.name, seq)
                    request = {"payload": base64.b64encode(text.encode()).decode(), "context": str(seq)}
                    self.checker.sent(spec.name, seq)
                    pending[seq] = trio.current_time()
                    await ws.send(json.dumps(request))
                    await trio.sleep(1 / spec.rate_per_s)
                # stopping: wait (bounded by the watchdog) for the acks of what was sent, then end
                while pending:
                    room = trio.Event()
                    await room.wait()
                nursery.cancel_scope.cancel()

            async def receive() -> None:
                while True:
                    answer = json.loads(await ws.receive())
                    seq = int(answer.get("context", -1))
                    if seq not in pending:
                        continue
                    del pending[seq]
                    if answer.get("result") == "ok":
                        self.checker.acked(spec.name, seq, str(answer.get("messageId")), broker)
                    else:
                        self.checker.failed(
                            spec.name, seq, f"{answer.get('result')}: {answer.get('errorMsg')}"
                        )
                    room.set()
                    self._notify()

            async def watchdog() -> None:
                while True:
                    await trio.sleep(0.25)
                    if pending and trio.current_time() - min(pending.values()) > spec.send_timeout_s:
                        raise SessionTimeoutError(f"no ack for {spec.send_timeout_s} s")

            nursery.start_soon(send)
            nursery.start_soon(receive)
            nursery.start_soon(watchdog)

    # -- consumers --------------------------------------------------------------------------------------

    async def run_consumer(self, subscription: str, late: trio.Event | None = None) -> None:
        urls = self._urls()
        query = "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"
        if late is not None:
            await self._subscribe_only(subscription, urls, query)
            await late.wait()
        while True:
            url = f"{next(urls)}/ws/v2/consumer/{NAMESPACE}/{self.topic}/{subscription}?{query}"
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    ws = await WsClient.connect(url, timeout_s=CONNECT_TIMEOUT_S)
            except (*_SESSION_ERRORS, trio.TooSlowError):
                self.stats.count(self.stats.connect_failures, subscription)
                await trio.sleep(RETRY_DELAY_S)
                continue
            self.stats.count(self.stats.sessions, subscription)
            self.subscribed[subscription].set()
            try:
                await self._consumer_session(subscription, ws)
            except* _SESSION_ERRORS as group:
                log.info("%s: session via %s ended: %s", subscription, ws.url, group.exceptions[0])
            finally:
                with trio.CancelScope(shield=True):
                    await ws.aclose()

    async def _subscribe_only(self, subscription: str, urls: cycle[str], query: str) -> None:
        """Create the durable subscription (at the earliest position) and leave it without reading."""
        while True:
            url = f"{next(urls)}/ws/v2/consumer/{NAMESPACE}/{self.topic}/{subscription}?{query}"
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    ws = await WsClient.connect(url, timeout_s=CONNECT_TIMEOUT_S)
            except (*_SESSION_ERRORS, trio.TooSlowError):
                self.stats.count(self.stats.connect_failures, subscription)
                await trio.sleep(RETRY_DELAY_S)
                continue
            with trio.CancelScope(shield=True):
                await ws.aclose()
            self.subscribed[subscription].set()
            return

    async def _consumer_session(self, subscription: str, ws: WsClient) -> None:
        while True:
            text: str | None = None
            with trio.move_on_after(self.idle_s):
                text = await ws.receive()
            if text is None:
                log.info("%s: nothing for %.0f s via %s: reconnecting", subscription, self.idle_s, ws.url)
                return
            message = json.loads(text)
            payload = base64.b64decode(message["payload"])
            self.checker.delivered(subscription, payload, str(message["messageId"]))
            self._notify()
            await ws.send(json.dumps({"messageId": message["messageId"]}))
