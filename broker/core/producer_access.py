"""Producer access modes of one topic, as Pulsar's (``ProducerAccessMode``): who may publish at once.

* ``SHARED`` (the default) - any number of producers; refused (:class:`ProducerBusyError`, "Topic has an
  existing exclusive producer: <name>") while an exclusive producer holds the topic or one waits for it.
* ``EXCLUSIVE`` - the only producer: refused (:class:`ProducerFencedError`) while any producer is connected
  or an exclusive one waits.
* ``WAIT_FOR_EXCLUSIVE`` - like ``EXCLUSIVE``, but while the topic is taken the producer waits in line (its
  client is told it is queued) and gets the topic when it is free, first come first served.
* ``EXCLUSIVE_WITH_FENCING`` - takes the topic at once: every producer connected is told to go away (its
  session ends; its client's reconnect is then refused) and every waiting one fails with
  :class:`ProducerFencedError`.

The topic epoch: each time an exclusive producer takes the topic the epoch moves to the next number (the first
is 0), or to the epoch the producer brings (a client reconnecting sends the epoch it was given). A producer
that brings an epoch older than the topic's is fenced ("Topic epoch has already moved"): another exclusive
producer held the topic in between. The epoch lives with the topic object: it starts again when the topic is
loaded anew (Pulsar keeps it in the managed ledger's properties; Magnetar does not persist it yet).

Theory of operation: :class:`ProducerAccess` is the state (the holder's name, the epoch, the queue);
:class:`~.topic_base.TopicBase` asks it before it adds a producer (:meth:`ProducerAccess.admit`), tells it
when one leaves (:meth:`ProducerAccess.released`: the first waiter is promoted as soon as the topic has no
producer left) and when the topic closes (:meth:`ProducerAccess.fail_waiting`). Nothing here is specific to a
protocol: the binary protocol names the mode in PRODUCER; WebSocket producers are ``SHARED``.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Mapping

import trio

from magnetar.broker.core.errors import ProducerBusyError, ProducerFencedError, ServiceError

WAITING_PRODUCERS_MAX = 1000
"""Producers one topic may hold in line for exclusive access."""


class AccessMode(enum.IntEnum):
    """Pulsar's ``ProducerAccessMode`` (same numbers)."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3

    @property
    def title(self) -> str:
        """Pulsar's name of the mode (``accessMode`` in the stats)."""
        return {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}[self.value]


class Waiter:
    """A producer in line for exclusive access: :attr:`granted` is set when it holds the topic (its
    :attr:`epoch`) or failed (:attr:`error`)."""

    __slots__ = ("epoch", "error", "granted", "name", "topic_epoch")

    def __init__(self, name: str, topic_epoch: int | None) -> None:
        self.name = name
        self.topic_epoch = topic_epoch
        self.granted = trio.Event()
        self.epoch = -1
        self.error: ServiceError | None = None


class ProducerAccess:
    """One topic's access state (see the module docstring)."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        """The topic epoch (None until an exclusive producer first took the topic)."""
        self.holder: str | None = None
        """The exclusive producer's name while one holds the topic."""
        self.waiting: deque[Waiter] = deque()

    def admit(
        self,
        mode: AccessMode,
        name: str,
        topic_epoch: int | None,
        producers: Mapping[str, object],
        fence: Callable[[], None],
    ) -> int | Waiter | None:
        """May producer ``name`` join now? The epoch it gets (None for ``SHARED``), a :class:`Waiter` to wait
        on (``WAIT_FOR_EXCLUSIVE`` while the topic is taken), or :class:`ProducerBusyError` /
        :class:`ProducerFencedError`. ``fence`` ends every connected producer (``EXCLUSIVE_WITH_FENCING``)."""
        taken = self.holder is not None or bool(self.waiting)
        if mode is AccessMode.SHARED:
            if taken:
                raise ProducerBusyError(f"Topic has an existing exclusive producer: {self.holder}")
            return None
        if mode is AccessMode.EXCLUSIVE:
            if taken:
                raise ProducerFencedError(f"Topic has an existing exclusive producer: {self.holder}")
            if producers:
                raise ProducerFencedError("Topic has existing shared producers")
        elif mode is AccessMode.WAIT_FOR_EXCLUSIVE:
            if self.holder is not None or producers or self.waiting:
                if len(self.waiting) >= WAITING_PRODUCERS_MAX:
                    raise ProducerBusyError(f"more than {WAITING_PRODUCERS_MAX} producers waiting")
                waiter = Waiter(name, topic_epoch)
                self.waiting.append(waiter)
                return waiter
        elif self.holder is not None or producers or self.waiting:  # EXCLUSIVE_WITH_FENCING
            self.fail_waiting(ProducerFencedError("Fenced out"))
            self.holder = None
            fence()
        self._check_epoch(topic_epoch)
        return self._take(name, topic_epoch)

    def _check_epoch(self, topic_epoch: int | None) -> None:
        current = -1 if self.epoch is None else self.epoch
        if topic_epoch is not None and topic_epoch < current:
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {current}, Producer epoch: {topic_epoch}"
            )

    def _take(self, name: str, topic_epoch: int | None) -> int:
        if topic_epoch is not None:
            self.epoch = topic_epoch
        else:
            self.epoch = 0 if self.epoch is None else self.epoch + 1
        self.holder = name
        return self.epoch

    def released(self, name: str, producers: Mapping[str, object]) -> None:
        """Producer ``name`` left; with the topic free, the first waiter that may take it is promoted."""
        if self.holder == name:
            self.holder = None
        while self.holder is None and not producers and self.waiting:
            waiter = self.waiting.popleft()
            try:
                self._check_epoch(waiter.topic_epoch)
            except ProducerFencedError as exc:
                waiter.error = exc
            else:
                waiter.epoch = self._take(waiter.name, waiter.topic_epoch)
            waiter.granted.set()

    def withdraw(self, waiter: Waiter, producers: Mapping[str, object]) -> None:
        """A waiter gave up (its client went away), or was granted the topic and could not use it."""
        if waiter in self.waiting:
            self.waiting.remove(waiter)
        elif waiter.error is None and self.holder == waiter.name and waiter.name not in producers:
            self.released(waiter.name, producers)

    def fail_waiting(self, error: ServiceError) -> None:
        """Every waiter fails with ``error`` (the topic closes, or a fencing producer took it)."""
        while self.waiting:
            waiter = self.waiting.popleft()
            waiter.error = error
            waiter.granted.set()
