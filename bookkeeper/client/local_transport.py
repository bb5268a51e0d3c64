"""An in-process :class:`~.transport.BookieTransport`: requests go straight to bookie request handlers
(``BookieCore`` objects) in the same process - "in-process bookies" for tests of the layers above.

A request is handed to its bookie at once, inside ``send``, as one burst of the bookie's work
(``begin_burst``/``end_burst``, as a bookie connection's reader dispatches what it read): a bookie whose
journal would sync next anyway syncs the request's record right there, on the caller's step. Every answer
passes through the transport's :class:`~.call_soon.CallSoon` queue, so a callback never runs inside ``send``
and the order is the order of events. In the standalone this is the whole way from a publish to the
bookie's journal: no task switch between the broker's add and the fdatasync that makes it durable, one
between the sync and the broker's completion (RESULTS.md: scheduler passes per message). The transport keeps
the exactly-once contract: :meth:`LocalTransport.disconnect` fails the requests a bookie has not answered
with CLOSED (a crashed bookie never answers) and refuses new ones with CONNECT until :meth:`reconnect`.

The client package may not import the bookie package, so handlers are typed structurally
(:class:`RequestHandler`); ``BookieCore`` satisfies it. Run :meth:`LocalTransport.run` in a nursery, or use
:func:`open_local_transport`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Protocol

import trio

from magnetar.bookkeeper.client.call_soon import CallSoon
from magnetar.bookkeeper.client.transport import BookieId, FailureReason, ResponseCallback, TransportFailure
from magnetar.bookkeeper.protocol import Request, Response

log = logging.getLogger(__name__)


class RequestHandler(Protocol):
    def handle(self, request: Request, respond: Callable[[Response], None]) -> None: ...

    def begin_burst(self) -> None:
        """Requests until :meth:`end_burst` arrive together (``BookieCore.begin_burst``)."""
        ...

    def end_burst(self) -> None:
        """The burst is over: the bookie may make its records durable and answer now."""
        ...


class _InFlight:
    __slots__ = ("answered", "callback")

    def __init__(self, callback: ResponseCallback) -> None:
        self.callback = callback
        self.answered = False


class LocalTransport:
    def __init__(self, handlers: Mapping[BookieId, RequestHandler] | None = None) -> None:
        self._handlers: dict[BookieId, RequestHandler] = dict(handlers or {})
        self._down: set[BookieId] = set()
        self._in_flight: dict[BookieId, dict[int, _InFlight]] = {}
        self._tokens = 0
        self._call_soon = CallSoon()

    def add_bookie(self, bookie: BookieId, handler: RequestHandler) -> None:
        self._handlers[bookie] = handler

    def disconnect(self, bookie: BookieId) -> None:
        """The connection to ``bookie`` breaks: unanswered requests fail (CLOSED), new ones fail (CONNECT)."""
        self._down.add(bookie)
        for call in self._in_flight.pop(bookie, {}).values():
            self._answer(call, TransportFailure(bookie, FailureReason.CLOSED, "connection lost"))

    def reconnect(self, bookie: BookieId) -> None:
        self._down.discard(bookie)

    def sends_parts(self) -> bool:
        """An add reaches its bookie with its payload parts (``AddRequest.tail``) unjoined: the bookie joins
        them once, as it stores the entry (``transport.SendsParts``)."""
        return True

    def send(self, bookie: BookieId, request: Request, callback: ResponseCallback) -> None:
        call = _InFlight(callback)
        if bookie in self._down or bookie not in self._handlers:
            self._answer(call, TransportFailure(bookie, FailureReason.CONNECT, "bookie not reachable"))
            return
        self._tokens += 1
        token = self._tokens
        self._in_flight.setdefault(bookie, {})[token] = call
        handler = self._handlers[bookie]

        def respond(response: Response) -> None:
            call = self._in_flight.get(bookie, {}).pop(token, None)
            if call is not None:
                self._answer(call, response)

        handler.begin_burst()
        try:
            handler.handle(request, respond)
        except Exception:  # a bookie bug must not surface in the caller; the request stays unanswered
            log.exception("bookie %s failed to handle %r", bookie, request)
        finally:
            handler.end_burst()

    def _answer(self, call: _InFlight, answer: Response | TransportFailure) -> None:
        if not call.answered:
            call.answered = True
            self._call_soon(call.callback, answer)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._call_soon.run(task_status=task_status)


@asynccontextmanager
async def open_local_transport(
    handlers: Mapping[BookieId, RequestHandler] | None = None,
) -> AsyncIterator[LocalTransport]:
    transport = LocalTransport(handlers)
    async with trio.open_nursery() as nursery:
        await nursery.start(transport.run)
        yield transport
        nursery.cancel_scope.cancel()
