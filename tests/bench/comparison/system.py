"""The shape every compared system has (Magnetar and each peer): one driver class per system.

Lifecycle, synchronous, called by the runner: :meth:`System.start` starts the server(s) on free loopback
ports under ``workdir`` and returns once they serve; :meth:`System.stop` stops every process it started by
pid (also after a failed start, and more than once). Measurements, asynchronous, run under
``anyio.run(..., backend=system.backend)``:

* ``publisher(topic, on_ack)``: an async context manager giving a :class:`Publisher`; creates the topic if
  the system needs that. ``send_many`` hands messages to the client without waiting for their acks; the
  client later calls ``on_ack(seq, ok)`` once per message, on the event loop's thread (clients with threads
  of their own hop back to it).
* ``consume(topic, on_payload, task_status=...)``: subscribes to ``topic`` from its first message, calls
  ``task_status.started()`` once subscribed, then ``on_payload(payload)`` for each message in order on the
  event loop's thread, acknowledging as :attr:`System.consume_mode` says; returns (after acknowledging what it
  received) when ``on_payload`` returns False. Cancellation stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import anyio

AckSink = Callable[[int, bool], None]
PayloadSink = Callable[[bytes], bool]


class Publisher(Protocol):
    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None: ...


class System(Protocol):
    name: str
    """As given to ``--peers`` (``redis-always``, ``magnetar-standalone``, ...)."""
    backend: str
    """``trio`` or ``asyncio``: the event loop its client library needs."""
    durability: str
    """What an acknowledgement means, in a few words, printed next to each of its figures."""
    durability_detail: str
    """The same at length, for the legend of the report."""
    consume_mode: str
    """How its consumer reads and acknowledges."""
    how: str
    """How it was started (set by :meth:`start`), for the report."""

    def available(self) -> str | None:
        """None when the server and client are installed, else why not."""
        ...

    def versions(self) -> dict[str, str]: ...

    def start(self, workdir: Path) -> None: ...

    def stop(self) -> None: ...

    def publisher(self, topic: str, on_ack: AckSink) -> AbstractAsyncContextManager[Publisher]: ...

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None: ...
