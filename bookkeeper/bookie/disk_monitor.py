"""Read-only mode and the disk monitor that drives it (BookKeeper's ``LedgerDirsMonitor`` + ``StateManager``).

Theory of operation (reference/bookkeeper.md §7). Every ``disk_check_interval_ms`` the monitor reads the
store's :meth:`~.ledger_store.LedgerStore.disk_usage`. Usage above ``disk_usage_threshold`` turns the bookie
read-only: it re-registers under ``/ledgers/available/readonly``, refuses normal adds with EREADONLY and still
accepts recovery (high-priority) adds so that ledger recovery can finish. Usage below
``disk_usage_lwm_threshold`` turns it writable again; the gap between the two thresholds keeps the bookie from
flapping (BookKeeper PR #3285). Above ``disk_usage_warn_threshold`` a warning is logged once per excursion.
The monitor only lifts a read-only mode it imposed itself; a mode forced by an operator stays.

:class:`ReadOnlyState` is the single source of truth for the mode: the request logic reads it on every add,
and listeners (registration, metrics) are told about each change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.bookie.errors import BookieError
from magnetar.bookkeeper.bookie.ledger_store import DiskUsage

log = logging.getLogger(__name__)

ModeListener = Callable[[bool], None]


class ReadOnlyState:
    def __init__(self, readonly: bool = False) -> None:
        self._readonly = readonly
        self.reason = ""
        self._listeners: list[ModeListener] = []

    @property
    def readonly(self) -> bool:
        return self._readonly

    def set(self, readonly: bool, reason: str) -> bool:
        """Switch mode; returns whether it changed. Listeners run synchronously and must not block."""
        if readonly == self._readonly:
            return False
        self._readonly = readonly
        self.reason = reason
        log.warning("bookie is now %s: %s", "READ-ONLY" if readonly else "writable", reason)
        for listener in list(self._listeners):
            try:
                listener(readonly)
            except Exception:
                log.exception("read-only mode listener failed")
        return True

    def add_listener(self, listener: ModeListener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None


@dataclass(frozen=True, slots=True)
class DiskThresholds:
    usage: float = 0.95
    warn: float = 0.90
    lwm: float = 0.90

    def __post_init__(self) -> None:
        if not (0 < self.lwm <= self.usage <= 1 and 0 < self.warn <= self.usage):
            raise ValueError(f"disk thresholds need 0 < lwm, warn <= usage <= 1: {self}")


DISK_FULL_REASON = "disk usage above disk_usage_threshold"


class DiskMonitor:
    def __init__(
        self,
        probe: Callable[[], DiskUsage],
        state: ReadOnlyState,
        thresholds: DiskThresholds,
        *,
        interval_ms: int,
        on_usage: Callable[[float], None] | None = None,
    ) -> None:
        self._probe = probe
        self._state = state
        self._thresholds = thresholds
        self._interval_s = interval_ms / 1000
        self._on_usage = on_usage
        self._imposed = False
        self._warned = False

    def check(self) -> float | None:
        """One evaluation: read the usage, switch mode if a threshold is crossed; return the usage."""
        try:
            used = self._probe().used_fraction
        except (OSError, BookieError) as exc:
            log.error("disk usage probe failed, mode unchanged: %s", exc)
            return None
        if self._on_usage is not None:
            self._on_usage(used)
        limits = self._thresholds
        if used > limits.warn and not self._warned:
            log.warning("disk usage %.1f%% is above disk_usage_warn_threshold=%s", used * 100, limits.warn)
        self._warned = used > limits.warn
        if used > limits.usage and not self._state.readonly:
            self._imposed = self._state.set(True, f"{DISK_FULL_REASON}: {used:.1%} > {limits.usage:.0%}")
        elif used < limits.lwm and self._imposed and self._state.readonly:
            self._state.set(False, f"disk usage {used:.1%} back below disk_usage_lwm_threshold={limits.lwm}")
            self._imposed = False
        return used

    async def run(self) -> None:
        while True:
            await trio.sleep(self._interval_s)
            self.check()
