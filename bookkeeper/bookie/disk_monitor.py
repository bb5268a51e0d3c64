"""Read-only mode and the disk monitor that drives it (BookKeeper's ``LedgerDirsMonitor`` + ``StateManager``).

Theory of operation. Every ``disk_check_interval_ms`` the monitor reads the usage of each volume the bookie
writes: the ledger directory's (:meth:`~.storage.ledger_store.LedgerStore.disk_usage`) and the journal's
(:meth:`~.storage.ledger_store.LedgerStore.journal_disk_usage`, the same file system unless the journal has a
volume of its own). A volume above ``disk_usage_threshold`` is *full* and turns the bookie read-only
(BookKeeper's ``readOnlyModeOnAnyDiskFullEnabled``): it re-registers under ``/ledgers/available/readonly``, so
that no new ensemble picks it, refuses normal adds with EREADONLY, so that writers replace it in their
ensembles, and still accepts recovery (high-priority) adds so that ledger recovery can finish. A volume is
full until its usage falls below ``disk_usage_lwm_threshold``; the gap between the two thresholds keeps the
bookie from flapping (BookKeeper PR #3285). The bookie turns writable again once no volume is full. Above
``disk_usage_warn_threshold`` a warning is logged once per excursion. The monitor only lifts a read-only mode
it imposed itself; a mode forced by an operator stays.

Why the journal too: every add is journaled before it is acknowledged, so a bookie whose journal volume is
full fails every add while its ledger volume looks healthy. Left writable it stays in every new ensemble, and
with similar fill rates on every bookie, writes stop across the cluster and never resume by themselves.
Read-only, it is skipped; the checkpoints keep deleting journal files the mark no longer needs
(``journal_max_backups``), and it comes back once space returns. A full journal volume also makes the bookie
*not ready* (:attr:`DiskMonitor.journal_full`, read by the readiness probe): it cannot take a normal write.

:class:`ReadOnlyState` is the single source of truth for the mode: the request logic reads it on every add,
and listeners (registration, metrics) are told about each change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.bookie.storage import BookieError, DiskUsage

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

Probe = Callable[[], DiskUsage]
LEDGER_VOLUME = "ledger"
JOURNAL_VOLUME = "journal"


class _Volume:
    def __init__(self, name: str, probe: Probe, on_usage: Callable[[float], None] | None) -> None:
        self.name = name
        self.probe = probe
        self.on_usage = on_usage
        self.full = False
        self.warned = False
        self.used: float | None = None


class DiskMonitor:
    def __init__(
        self,
        probe: Probe,
        state: ReadOnlyState,
        thresholds: DiskThresholds,
        *,
        interval_ms: int,
        on_usage: Callable[[float], None] | None = None,
        journal_probe: Probe | None = None,
        on_journal_usage: Callable[[float], None] | None = None,
    ) -> None:
        """``probe`` reads the ledger volume; ``journal_probe`` (if given) the journal's."""
        self._state = state
        self._thresholds = thresholds
        self._interval_s = interval_ms / 1000
        self._volumes = [_Volume(LEDGER_VOLUME, probe, on_usage)]
        if journal_probe is not None:
            self._volumes.append(_Volume(JOURNAL_VOLUME, journal_probe, on_journal_usage))
        self._imposed = False

    @property
    def full_volumes(self) -> list[str]:
        """Names of the volumes above ``disk_usage_threshold`` (and not yet back below the low-water mark)."""
        return [volume.name for volume in self._volumes if volume.full]

    @property
    def journal_full(self) -> bool:
        return JOURNAL_VOLUME in self.full_volumes

    def check(self) -> float | None:
        """One evaluation: read every volume's usage, switch mode if a threshold is crossed; return the ledger
        volume's usage (None if its probe failed)."""
        for volume in self._volumes:
            self._check_volume(volume)
        full = [volume for volume in self._volumes if volume.full]
        limits = self._thresholds
        if full and not self._state.readonly:
            reasons = ", ".join(
                f"{v.name} {DISK_FULL_REASON}: {v.used:.1%} > {limits.usage:.0%}" for v in full
            )
            self._imposed = self._state.set(True, reasons)
        elif not full and self._imposed and self._state.readonly:
            self._state.set(False, f"disk usage back below disk_usage_lwm_threshold={limits.lwm}")
            self._imposed = False
        return self._volumes[0].used

    def _check_volume(self, volume: _Volume) -> None:
        try:
            used = volume.probe().used_fraction
        except (OSError, BookieError) as exc:
            log.error("%s disk usage probe failed, its state is unchanged: %s", volume.name, exc)
            volume.used = None
            return
        volume.used = used
        if volume.on_usage is not None:
            volume.on_usage(used)
        limits = self._thresholds
        if used > limits.warn and not volume.warned:
            log.warning(
                "%s disk usage %.1f%% is above disk_usage_warn_threshold=%s",
                volume.name,
                used * 100,
                limits.warn,
            )
        volume.warned = used > limits.warn
        if used > limits.usage:
            volume.full = True
        elif used < limits.lwm:
            volume.full = False

    async def run(self) -> None:
        while True:
            await trio.sleep(self._interval_s)
            self.check()
