"""Listener registries shared by the metadata-store backends.

Listeners are synchronous callables run on the trio thread (see :mod:`.api`). A listener that raises is a bug
in its owner, not in the store: it is logged and the remaining listeners still see the event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from magnetar.bookkeeper.metadata.api import Unregister

log = logging.getLogger(__name__)

EventT = TypeVar("EventT")


class ListenerSet(Generic[EventT]):
    def __init__(self) -> None:
        self._listeners: list[Callable[[EventT], None]] = []

    def add(self, listener: Callable[[EventT], None]) -> Unregister:
        self._listeners.append(listener)

        def unregister() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unregister

    def emit(self, event: EventT) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("metadata listener %r failed on %s", listener, event)
