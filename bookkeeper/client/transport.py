"""The seam between the replication client and the network.

The client never touches sockets: it hands a request to a :class:`BookieTransport` together with a callback,
and the transport calls the callback exactly once with the bookie's response or with a
:class:`TransportFailure` (could not connect, connection lost, request timed out). This callback style keeps
thousands of pipelined adds cheap (no task per request) and lets the deterministic simulation substitute a
fake network with message loss, delay, reordering and partitions.

Implementations: the TCP transport (:mod:`.tcp_transport`, one pipelined connection per bookie) and the
simulation's fake network (``tests/sim``). ``request.request_id`` must be unique among the requests in flight
to one bookie; :func:`next_request_id` gives process-wide unique ids.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from magnetar.bookkeeper.protocol import Request, Response

BookieId = str
"""A bookie's identity, ``host:port`` (BookKeeper's default bookie id)."""


class FailureReason(enum.Enum):
    CONNECT = "connect"  # BookieHandleNotAvailable: could not reach the bookie
    CLOSED = "closed"  # the connection broke before the response arrived
    TIMEOUT = "timeout"  # no response within the request timeout
    SHUTDOWN = "shutdown"  # the transport is closing


@dataclass(frozen=True, slots=True)
class TransportFailure:
    bookie: BookieId
    reason: FailureReason
    detail: str = ""


ResponseCallback = Callable[[Response | TransportFailure], None]


class BookieTransport(Protocol):
    def send(self, bookie: BookieId, request: Request, callback: ResponseCallback) -> None:
        """Queue ``request`` for ``bookie``; ``callback`` runs exactly once, on the trio thread, later.

        Never calls ``callback`` synchronously from inside ``send`` (callers may hold state mid-update).
        """
        ...


@runtime_checkable
class TimesOutRequests(Protocol):
    """A transport that times its requests out itself (it keeps each request's deadline anyway, to free its
    state and drop a late response). :class:`~.bookie_client.BookieClient` hands it the client's timeouts and
    runs no timer of its own for it, so each request has one timeout tracker."""

    def take_request_timeouts(self, add_timeout_ms: int, read_timeout_ms: int) -> None:
        """Time out adds (and LAC writes) after ``add_timeout_ms``, other requests after ``read_timeout_ms``,
        for requests sent from now on."""
        ...


@runtime_checkable
class SendsParts(Protocol):
    """A transport that sends an add's ``tail`` parts after its ``body`` itself (a gather write: the payload
    is never copied on its way to the socket). Every other transport gets each add whole (its parts joined
    by :class:`~.bookie_client.BookieClient`)."""

    def sends_parts(self) -> bool:
        """True (the marker of this protocol)."""
        ...


_request_ids = itertools.count(1)


def next_request_id() -> int:
    return next(_request_ids)
