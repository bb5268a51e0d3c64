"""The statistics of an interleaved A/B with an A/A control (``tests/bench/ab_standalone.py``), pure.

A *pair* is two runs of one phase, taken back to back: an A/B pair runs the old build and the new one, an A/A
pair runs one build twice, in the same order pattern. Each pair gives one ratio, new / old (for an A/A pair,
the run in the new build's place / the run in the old build's place); ratios are handled as natural
logarithms so that +x and -x are the same distance from "no change".

* change: the median of the A/B pairs' log-ratios (a paired figure: a drift of the machine's load that
  moves both runs of a pair cancels out);
* A/A change: the same over the A/A pairs - what "no change" looked like in this run;
* detectable effect: the half-width of a ~95 % interval of the change if nothing had changed, from the
  spread of the A/A log-ratios (robust: 1.4826 x their median absolute deviation) and the number of A/B
  pairs: ``t * 1.2533 * spread / sqrt(pairs)`` (1.2533: the median's standard error over the mean's, normal
  case; ``t``: Student's 97.5 % quantile for the A/A pairs' degrees of freedom, since their spread is itself
  estimated), and never less than the A/A change itself (a control that moved by x shows that x is noise);
* verdict: worse / better when the change is beyond the detectable effect; else "no worse" when the whole
  interval (change + detectable) stays below the tolerance the guard is for (3 % by default), else "inside
  the noise" (the run could not rule out a regression as large as the tolerance).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_AA_PAIRS = 3
"""With fewer A/A pairs the control's spread is not estimated and no effect is called detectable."""

MAD_TO_SIGMA = 1.4826
"""The median absolute deviation times this estimates a normal distribution's standard deviation."""

MEDIAN_EFFICIENCY = 1.2533
"""The median's standard error over the mean's, for normal data (sqrt(pi / 2))."""

T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
"""Student's t, 97.5 % quantile, by degrees of freedom (between two rows the smaller row's, the larger t)."""

VERDICTS = ("better", "worse", "no worse", "inside the noise")


@dataclass(frozen=True)
class Pair:
    """One pair of runs of a phase: the figure per message in the old build's place and in the new one's."""

    old: float
    new: float

    def log_ratio(self) -> float:
        if self.old <= 0 or self.new <= 0:
            raise ValueError(f"a figure per message must be positive, got old={self.old} new={self.new}")
        return math.log(self.new / self.old)


@dataclass(frozen=True)
class PhaseSummary:
    phase: str
    pairs: int
    aa_pairs: int
    old_median: float
    new_median: float
    change: float
    """Log of the median A/B ratio."""
    aa_change: float | None
    """Log of the median A/A ratio (None without A/A pairs)."""
    detectable: float | None
    """Log half-width; None when the A/A control has too few pairs to tell."""
    spread: float | None
    """Robust standard deviation of the A/A log-ratios."""
    verdict: str


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("the median of no values")
    return float(statistics.median(values))


def robust_spread(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation from the median: a standard deviation that a few wild runs (a
    neighbour's burst of load) do not inflate."""
    centre = median(values)
    return MAD_TO_SIGMA * median([abs(value - centre) for value in values])


def t_975(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {degrees_of_freedom}")
    row = max(df for df in T_975 if df <= degrees_of_freedom)
    return T_975[row] if degrees_of_freedom <= 120 else 1.960


def detectable_effect(aa_log_ratios: Sequence[float], ab_pairs: int) -> float | None:
    """The smallest change (log) the median of ``ab_pairs`` A/B ratios can tell from noise, judged by the A/A
    control's log-ratios; None with fewer than :data:`MIN_AA_PAIRS` of them."""
    if ab_pairs < 1:
        raise ValueError(f"an A/B needs at least one pair, got {ab_pairs}")
    if len(aa_log_ratios) < MIN_AA_PAIRS:
        return None
    half_width = (
        t_975(len(aa_log_ratios) - 1) * MEDIAN_EFFICIENCY * robust_spread(aa_log_ratios) / math.sqrt(ab_pairs)
    )
    return max(half_width, abs(median(aa_log_ratios)))


def verdict(change: float, detectable: float | None, tolerance: float) -> str:
    """``change`` and ``detectable`` are logs of ratios, ``tolerance`` too (log(1.03) for 3 %). More is worse
    (CPU time or instructions per message)."""
    if detectable is None:
        return "inside the noise"
    if change - detectable > 0:
        return "worse"
    if change + detectable < 0:
        return "better"
    if change + detectable <= tolerance:
        return "no worse"
    return "inside the noise"


def summarize(phase: str, ab: Sequence[Pair], aa: Sequence[Pair], tolerance_percent: float) -> PhaseSummary:
    if not ab:
        raise ValueError(f"{phase}: no A/B pair")
    ab_logs = [pair.log_ratio() for pair in ab]
    aa_logs = [pair.log_ratio() for pair in aa]
    change = median(ab_logs)
    detectable = detectable_effect(aa_logs, len(ab))
    return PhaseSummary(
        phase=phase,
        pairs=len(ab),
        aa_pairs=len(aa),
        old_median=median([pair.old for pair in ab]),
        new_median=median([pair.new for pair in ab]),
        change=change,
        aa_change=median(aa_logs) if aa_logs else None,
        detectable=detectable,
        spread=robust_spread(aa_logs) if aa_logs else None,
        verdict=verdict(change, detectable, math.log1p(tolerance_percent / 100)),
    )


def percent(log_ratio: float) -> float:
    """A log-ratio as a percentage change: log(1.05) -> 5.0."""
    return math.expm1(log_ratio) * 100


def pairs_needed(spread: float, aa_pairs: int, target_percent: float) -> int | None:
    """How many A/B pairs would bring the detectable effect down to ``target_percent`` at this A/A spread
    (None when the spread is zero or the control too small to tell)."""
    if aa_pairs < MIN_AA_PAIRS or spread <= 0:
        return None
    target = math.log1p(target_percent / 100)
    return math.ceil((t_975(aa_pairs - 1) * MEDIAN_EFFICIENCY * spread / target) ** 2)
