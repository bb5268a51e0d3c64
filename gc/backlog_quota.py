"""Backlog quotas: checking a topic's backlog against its limits, and what producers are told.

Pulsar's ``BacklogQuotaManager``: every ``backlog_quota_check_interval_s`` each topic's backlog is compared
with its quotas - ``destination_storage`` (bytes behind the slowest subscription) and ``message_age`` (age of
the oldest unacknowledged message). When one is exceeded its policy applies:

* ``consumer_backlog_eviction`` - the retention service moves the slow cursors forward (size: down to
  ``backlog_eviction_target_fraction`` of the quota; age: past the messages older than the limit);
* ``producer_request_hold`` / ``producer_exception`` - the topic is marked; the broker's producers ask
  :class:`BacklogQuotaChecker` before publishing. ``HOLD`` means: wait with
  :meth:`BacklogQuotaChecker.wait_until_within_quota` (under the producer's own send timeout); ``REJECT``
  means: fail the publish (Pulsar's ``ProducerBlockedQuotaExceededException``). The mark is cleared by the
  next check that finds the topic within its quotas, which also wakes every held producer.

The broker holds a :class:`BacklogQuotaChecker` (the :class:`BacklogQuotaMonitor` of the retention service)
and calls only ``verdict`` and ``wait_until_within_quota``; it never imports more of ``gc``.
"""

from __future__ import annotations

import enum
from typing import Protocol

import trio

from magnetar.gc.policies import BacklogPolicy


class QuotaVerdict(enum.Enum):
    OK = "ok"
    HOLD = "hold"
    """``producer_request_hold``: wait until the backlog is within quota again."""
    REJECT = "reject"
    """``producer_exception``: refuse the publish."""


class BacklogQuotaChecker(Protocol):
    def verdict(self, ml_name: str) -> QuotaVerdict:
        """Whether a producer of the topic in managed ledger ``ml_name`` may publish now (no I/O)."""
        ...

    async def wait_until_within_quota(self, ml_name: str) -> None:
        """Return once the topic is within its backlog quota (at once if it is)."""
        ...


class BacklogQuotaMonitor:
    """The producer-facing state of backlog quotas, updated by the retention service's checks."""

    def __init__(self) -> None:
        self._exceeded: dict[str, BacklogPolicy] = {}
        self._released: dict[str, trio.Event] = {}

    @property
    def any_exceeded(self) -> bool:
        return bool(self._exceeded)

    def verdict(self, ml_name: str) -> QuotaVerdict:
        policy = self._exceeded.get(ml_name)
        if policy is BacklogPolicy.PRODUCER_REQUEST_HOLD:
            return QuotaVerdict.HOLD
        if policy is BacklogPolicy.PRODUCER_EXCEPTION:
            return QuotaVerdict.REJECT
        return QuotaVerdict.OK

    async def wait_until_within_quota(self, ml_name: str) -> None:
        while ml_name in self._exceeded:
            event = self._released.setdefault(ml_name, trio.Event())
            await event.wait()

    def mark_exceeded(self, ml_name: str, policy: BacklogPolicy) -> None:
        if policy is BacklogPolicy.CONSUMER_BACKLOG_EVICTION:
            self.mark_within(ml_name)
            return
        self._exceeded[ml_name] = policy

    def mark_within(self, ml_name: str) -> None:
        self._exceeded.pop(ml_name, None)
        event = self._released.pop(ml_name, None)
        if event is not None:
            event.set()

    def forget_except(self, ml_names: set[str]) -> None:
        """Drop the state of topics no longer served here (closed or unloaded)."""
        for name in [n for n in self._exceeded if n not in ml_names]:
            self.mark_within(name)

    @property
    def exceeded(self) -> dict[str, BacklogPolicy]:
        return dict(self._exceeded)
