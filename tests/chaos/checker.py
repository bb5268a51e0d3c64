"""The failure suite's checker: every publish, acknowledgement and delivery, and what they must satisfy.

Sans-IO: the workload tells it what happened (``sent``, ``acked``, ``failed``, ``delivered``), with the time
and the phase of the scenario; :meth:`Checker.verdict` says what went wrong. The properties:

* **no loss** - every acknowledged message is delivered, at least once, to every durable subscription;
* **order per producer** - on each subscription, the *first* deliveries of one producer's messages come in
  the order it sent them (a redelivery of something already delivered is a duplicate, not a reordering;
  Exclusive subscriptions, where Pulsar guarantees this order);
* **nothing invented** - every delivery is a message some producer sent (a payload the workload did not
  produce, or a sequence number never sent, is a phantom);
* a message whose send failed or timed out has an unknown outcome: it may or may not be delivered, and
  neither is an error (they are counted as "unknown" and "unknown delivered").

Duplicates are counted and reported, not failed: at-least-once delivery allows them (a redelivery after a
consumer or broker failover, an acknowledgement not yet persisted). Unavailability is the time during
which no producer received any acknowledgement for more than ``gap_s`` (counted from the last ack before
the gap to the first after it), within the time producers were publishing.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field


def payload_for(producer: str, seq: int) -> str:
    """The message text of ``producer``'s ``seq``-th message (what :meth:`Checker.delivered` parses)."""
    return json.dumps({"p": producer, "s": seq}, separators=(",", ":"))


@dataclass
class _Ack:
    time: float
    phase: str
    message_id: str
    broker: str


@dataclass
class SubscriptionResult:
    name: str
    delivered_acked: int = 0
    """Acknowledged messages delivered at least once."""
    deliveries: int = 0
    duplicates: int = 0
    unknown_delivered: int = 0
    lost: list[tuple[str, int]] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    sent: int
    acked: int
    unknown: int
    subscriptions: list[SubscriptionResult]
    unavailable_s: float
    longest_gap_s: float
    acks_by_phase: dict[str, int]
    details: list[str]

    @property
    def ok(self) -> bool:
        return not any(s.lost or s.order_violations or s.phantoms for s in self.subscriptions)


class Checker:
    def __init__(self, subscriptions: list[str], clock: Callable[[], float], *, gap_s: float = 1.0) -> None:
        self.subscriptions = list(subscriptions)
        self._clock = clock
        self.gap_s = gap_s
        self.phase = "start"
        self.phases: list[tuple[float, str]] = [(clock(), "start")]
        self._sent: dict[str, set[int]] = defaultdict(set)
        self._sent_time: dict[tuple[str, int], tuple[float, str]] = {}
        self._acked: dict[tuple[str, int], _Ack] = {}
        self._failed: dict[tuple[str, int], str] = {}
        self._ack_times: list[float] = []
        self._first_send = float("inf")
        self._last_send = float("-inf")
        # per subscription
        self._seen: dict[str, dict[tuple[str, int], int]] = {s: {} for s in subscriptions}
        self._high: dict[str, dict[str, int]] = {s: {} for s in subscriptions}
        self._results = {s: SubscriptionResult(s) for s in subscriptions}
        self._log: list[str] = []

    # -- events ----------------------------------------------------------------------------------------

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.phases.append((self._clock(), phase))

    def sent(self, producer: str, seq: int) -> None:
        now = self._clock()
        self._sent[producer].add(seq)
        self._sent_time[(producer, seq)] = (now, self.phase)
        self._first_send = min(self._first_send, now)
        self._last_send = max(self._last_send, now)

    def acked(self, producer: str, seq: int, message_id: str, broker: str) -> None:
        key = (producer, seq)
        assert seq in self._sent[producer], f"ack for {key}, which was never sent"
        if key in self._failed:
            # the client gave up on it, yet the broker acknowledged it: it is stored after all
            self._log.append(f"late ack for {key} after {self._failed.pop(key)} (phase {self.phase})")
        now = self._clock()
        if key not in self._acked:
            for name in self.subscriptions:  # delivered before its ack reached the producer
                if key in self._seen[name]:
                    self._results[name].delivered_acked += 1
                    self._results[name].unknown_delivered -= 1
        self._acked[key] = _Ack(now, self.phase, message_id, broker)
        self._ack_times.append(now)

    def failed(self, producer: str, seq: int, reason: str) -> None:
        """The send failed or timed out: its outcome is unknown."""
        key = (producer, seq)
        if key not in self._acked:
            self._failed[key] = reason

    def delivered(self, subscription: str, payload: bytes | str, message_id: str) -> None:
        result = self._results[subscription]
        result.deliveries += 1
        key = self._parse(payload)
        if key is None or key[1] not in self._sent[key[0]]:
            result.phantoms.append(f"{payload!r} as {message_id} (phase {self.phase})")
            return
        seen = self._seen[subscription]
        if key in seen:
            seen[key] += 1
            result.duplicates += 1
            return
        seen[key] = 1
        producer, seq = key
        high = self._high[subscription].get(producer, -1)
        if seq < high:
            result.order_violations.append(
                f"{producer} #{seq} first delivered as {message_id} after #{high} (phase {self.phase})"
            )
        self._high[subscription][producer] = max(high, seq)
        if key in self._acked:
            result.delivered_acked += 1
        else:
            result.unknown_delivered += 1

    # -- questions --------------------------------------------------------------------------------------

    @property
    def acked_count(self) -> int:
        return len(self._acked)

    def missing(self, subscription: str) -> int:
        """Acknowledged messages not yet delivered to ``subscription``."""
        return len(self._acked) - self._results[subscription].delivered_acked

    def missing_total(self) -> int:
        return sum(self.missing(s) for s in self.subscriptions)

    def delivered_sent_in(self, phase_prefix: str, producer: str) -> list[tuple[str, int]]:
        """``producer``'s messages sent in a phase named ``phase_prefix...`` that some subscription got."""
        return sorted(
            key
            for key, (_, phase) in self._sent_time.items()
            if key[0] == producer
            and phase.startswith(phase_prefix)
            and any(key in self._seen[s] for s in self.subscriptions)
        )

    def ack_latencies(self, phase_prefix: str) -> list[float]:
        """Publish latencies (send to ack, seconds) of the messages acknowledged in ``phase_prefix...``."""
        return sorted(
            ack.time - self._sent_time[key][0]
            for key, ack in self._acked.items()
            if ack.phase.startswith(phase_prefix)
        )

    def longest_gap_between(self, start: float, end: float) -> float:
        """The longest time without any acknowledgement within ``[start, end]`` (the window's edges count as
        acknowledgements: a gap that began before ``start`` is counted from ``start``)."""
        inside = [t for t in sorted(self._ack_times) if start <= t <= end]
        edges = [start, *inside, end]
        return max((b - a for a, b in itertools.pairwise(edges)), default=0.0)

    def acks_since(self, since: float) -> int:
        return sum(1 for t in self._ack_times if t >= since)

    def verdict(self) -> Verdict:
        results = []
        details = list(self._log)
        for name in self.subscriptions:
            result = self._results[name]
            seen = self._seen[name]
            result.lost = sorted(key for key in self._acked if key not in seen)
            results.append(result)
            details += self._describe_lost(name, result.lost)
            details += [f"{name}: order violation: {v}" for v in result.order_violations[:20]]
            details += [f"{name}: phantom delivery: {p}" for p in result.phantoms[:20]]
        sent = sum(len(seqs) for seqs in self._sent.values())
        unavailable, longest = self._unavailability()
        by_phase: dict[str, int] = defaultdict(int)
        for ack in self._acked.values():
            by_phase[ack.phase] += 1
        return Verdict(
            sent=sent,
            acked=len(self._acked),
            unknown=sent - len(self._acked),
            subscriptions=results,
            unavailable_s=unavailable,
            longest_gap_s=longest,
            acks_by_phase=dict(by_phase),
            details=details,
        )

    # -- internals -------------------------------------------------------------------------------------

    @staticmethod
    def _parse(payload: bytes | str) -> tuple[str, int] | None:
        try:
            document = json.loads(payload)
            return str(document["p"]), int(document["s"])
        except (ValueError, KeyError, TypeError):
            return None

    def _describe_lost(self, subscription: str, lost: list[tuple[str, int]]) -> list[str]:
        lines = []
        for producer, seq in lost[:30]:
            ack = self._acked[(producer, seq)]
            sent_at, sent_phase = self._sent_time[(producer, seq)]
            start = self.phases[0][0]
            lines.append(
                f"{subscription}: LOST {producer} #{seq}: sent at {sent_at - start:.2f}s ({sent_phase}), "
                f"acked at {ack.time - start:.2f}s ({ack.phase}) as {ack.message_id} by {ack.broker}"
            )
        if len(lost) > 30:
            lines.append(f"{subscription}: ... and {len(lost) - 30} more lost")
        return lines

    def _unavailability(self) -> tuple[float, float]:
        if not self._ack_times or self._first_send == float("inf"):
            return 0.0, 0.0
        times = sorted(self._ack_times)
        edges = [self._first_send, *times]
        if self._last_send > times[-1]:
            edges.append(self._last_send)
        gaps = [b - a for a, b in itertools.pairwise(edges)]
        long_gaps = [gap for gap in gaps if gap > self.gap_s]
        return sum(long_gaps), max(gaps, default=0.0)


def summary_table(title: str, verdict: Verdict) -> str:
    """The scenario's summary: one row per subscription, then the producers' side and unavailability."""
    header = (
        f"{'subscription':<14}{'acked':>8}{'delivered':>11}{'lost':>6}{'dup':>7}{'order':>7}{'phantom':>9}"
    )
    lines = [f"== {title} ==", header, "-" * len(header)]
    for s in verdict.subscriptions:
        lines.append(
            f"{s.name:<14}{verdict.acked:>8}{s.delivered_acked:>11}{len(s.lost):>6}{s.duplicates:>7}"
            f"{len(s.order_violations):>7}{len(s.phantoms):>9}"
        )
    unknown_delivered = max((s.unknown_delivered for s in verdict.subscriptions), default=0)
    lines.append(
        f"sent {verdict.sent}, acked {verdict.acked}, unknown outcome {verdict.unknown} "
        f"(of which delivered {unknown_delivered}); unavailable {verdict.unavailable_s:.1f} s "
        f"(longest ack gap {verdict.longest_gap_s:.1f} s)"
    )
    lines.append("acks by phase: " + ", ".join(f"{p} {n}" for p, n in verdict.acks_by_phase.items()))
    lines.append("verdict: " + ("OK" if verdict.ok else "FAILED"))
    return "\n".join(lines)
