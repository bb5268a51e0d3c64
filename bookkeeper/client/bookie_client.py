"""Requests to bookies with client-side timeouts and exactly-once answers (BookKeeper's ``BookieClient``).

Every operation sends through :meth:`BookieClient.send`, which wraps the transport: the operation's callback
runs exactly once - with the bookie's response, with the transport's failure, or with a TIMEOUT failure when
neither arrived within ``add_timeout_ms`` / ``read_timeout_ms`` (whichever applies). A late answer after a
timeout is dropped. Timeouts cost no task per request: requests of one kind share one timeout length, so
their deadlines are already in order and a FIFO (:class:`TimeoutQueue`) watched by one task suffices.

Each request has one timeout tracker. A transport that keeps its requests' deadlines itself (the TCP
transport, :class:`~.transport.TimesOutRequests`: it must, to free a request's state and drop its late
answer) is handed the client's timeouts and is that tracker; the client's queues then hold its calls only to
answer them SHUTDOWN at close. For the other transports (in-process bookies, the simulation) the queues
time the requests out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import trio

from magnetar.bookkeeper.client.call_soon import CallSoon
from magnetar.bookkeeper.client.transport import (
    BookieId,
    BookieTransport,
    FailureReason,
    SendsParts,
    TimesOutRequests,
    TransportFailure,
)
from magnetar.bookkeeper.protocol import AddRequest, Request, Response

Answer = Response | TransportFailure
AnswerCallback = Callable[[Answer], None]


class _Call:
    __slots__ = ("bookie", "callback", "deadline", "done")

    def __init__(self, bookie: BookieId, callback: AnswerCallback, deadline: float) -> None:
        self.bookie = bookie
        self.callback = callback
        self.deadline = deadline
        self.done = False

    def answer(self, answer: Answer) -> None:
        if self.done:
            return
        self.done = True
        self.callback(answer)


class TimeoutQueue:
    """Calls that all time out after ``timeout_s``; one task fails the overdue ones."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._calls: deque[_Call] = deque()
        self._wakeup = trio.Event()

    def push(self, call: _Call) -> None:
        calls = self._calls
        while calls and calls[0].done:
            calls.popleft()
        calls.append(call)
        self._wakeup.set()

    async def run(self) -> None:
        calls = self._calls
        while True:
            while calls and calls[0].done:
                calls.popleft()
            if not calls:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            await trio.sleep_until(calls[0].deadline)
            now = trio.current_time()
            while calls and calls[0].deadline <= now:
                call = calls.popleft()
                call.answer(TransportFailure(call.bookie, FailureReason.TIMEOUT, "client timeout"))

    def fail_all(self, reason: FailureReason) -> None:
        calls, self._calls = self._calls, deque()
        for call in calls:
            call.answer(TransportFailure(call.bookie, reason, "client shutting down"))


class BookieClient:
    def __init__(
        self, transport: BookieTransport, call_soon: CallSoon, add_timeout_s: float, read_timeout_s: float
    ) -> None:
        self._transport = transport
        self._call_soon = call_soon
        if isinstance(transport, TimesOutRequests):  # it keeps the deadlines: one tracker per request
            transport.take_request_timeouts(round(add_timeout_s * 1000), round(read_timeout_s * 1000))
            add_timeout_s = read_timeout_s = math.inf  # the queues then only answer SHUTDOWN at close
        self.adds = TimeoutQueue(add_timeout_s)
        self.reads = TimeoutQueue(read_timeout_s)
        self._closed = False
        self._whole_adds = not isinstance(transport, SendsParts)
        """Join each add's parts before the transport sees it (a transport that cannot send them as parts)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.adds.run)
            nursery.start_soon(self.reads.run)
            task_status.started()

    def send(
        self, bookie: BookieId, request: Request, timeouts: TimeoutQueue, callback: AnswerCallback
    ) -> None:
        call = _Call(bookie, callback, trio.current_time() + timeouts.timeout_s)
        if self._closed:
            self._call_soon(call.answer, TransportFailure(bookie, FailureReason.SHUTDOWN, "client closed"))
            return
        timeouts.push(call)
        if self._whole_adds and type(request) is AddRequest:
            request = request.whole()
        self._transport.send(bookie, request, call.answer)

    def close(self) -> None:
        """Fail everything in flight (SHUTDOWN); later sends fail at once."""
        self._closed = True
        self.adds.fail_all(FailureReason.SHUTDOWN)
        self.reads.fail_all(FailureReason.SHUTDOWN)
