"""The A/B guard's statistics (``tests/bench/ab_stats.py``): medians, the A/A-based detectable effect and the
verdict, on figures of the kind ``make bench-ab`` measures (µs of CPU per message). No timing here."""

from __future__ import annotations

import math

import pytest
from bench.ab_stats import (
    MIN_AA_PAIRS,
    Pair,
    detectable_effect,
    median,
    pairs_needed,
    percent,
    robust_spread,
    summarize,
    t_975,
    verdict,
)

TOLERANCE = math.log1p(0.03)


def test_median_of_odd_and_even_counts_and_of_nothing() -> None:
    assert median([14.77, 14.17, 13.70]) == 14.17
    assert median([5.18, 4.98, 5.07, 4.80]) == pytest.approx(5.025)
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_a_pair_is_the_log_of_new_over_old_and_refuses_a_figure_that_is_not_positive() -> None:
    assert Pair(old=10.0, new=11.0).log_ratio() == pytest.approx(math.log(1.1))
    assert Pair(old=11.0, new=10.0).log_ratio() == pytest.approx(-Pair(old=10.0, new=11.0).log_ratio())
    with pytest.raises(ValueError, match="positive"):
        Pair(old=0.0, new=3.1).log_ratio()


def test_percent_turns_a_log_ratio_back_into_a_change() -> None:
    assert percent(math.log(1.05)) == pytest.approx(5.0)
    assert percent(math.log(0.9)) == pytest.approx(-10.0)
    assert percent(0.0) == 0.0


def test_the_robust_spread_is_not_inflated_by_one_wild_pair() -> None:
    calm = [-0.02, -0.01, 0.0, 0.01, 0.02]
    # median 0, absolute deviations 0.02 0.01 0 0.01 0.02 -> MAD 0.01
    assert robust_spread(calm) == pytest.approx(0.014826)
    # a neighbour's burst made one pair 40 % off: the spread barely moves (MAD 0.01 -> 0.01)
    assert robust_spread([-0.02, -0.01, 0.0, 0.01, 0.40]) == pytest.approx(0.014826)


def test_student_t_takes_the_row_at_or_below_the_degrees_of_freedom() -> None:
    assert t_975(4) == 2.776
    assert t_975(22) == 2.086  # between the rows 20 and 25: the row of 20, the larger t
    assert t_975(500) == 1.960
    with pytest.raises(ValueError, match="at least 1"):
        t_975(0)


def test_the_detectable_effect_follows_the_a_a_spread_and_shrinks_with_the_root_of_the_pairs() -> None:
    aa = [-0.02, -0.01, 0.0, 0.01, 0.02]  # spread 0.014826, 4 degrees of freedom
    # 2.776 x 1.2533 x 0.014826 / sqrt(9) = 0.01719: a change of 1.7 % is detectable with 9 pairs ...
    assert detectable_effect(aa, 9) == pytest.approx(0.017194, abs=1e-6)
    # ... and of 0.86 % with 36
    assert detectable_effect(aa, 36) == pytest.approx(0.008597, abs=1e-6)


def test_a_control_that_moved_makes_its_own_offset_the_smallest_detectable_effect() -> None:
    # every A/A pair 5 % apart (a drift the interleaving did not cancel): nothing under 5 % is an effect
    drifted = [0.049, 0.050, 0.051, 0.050]
    assert detectable_effect(drifted, 12) == pytest.approx(0.050)


def test_too_few_a_a_pairs_tell_nothing_and_an_a_b_needs_a_pair() -> None:
    assert MIN_AA_PAIRS == 3
    assert detectable_effect([0.01, -0.02], 10) is None
    with pytest.raises(ValueError, match="at least one pair"):
        detectable_effect([0.0, 0.01, -0.01], 0)


@pytest.mark.parametrize(
    ("change_percent", "detectable_percent", "expected"),
    [
        (+8.0, 3.0, "worse"),  # beyond the noise, up
        (+2.0, 1.5, "worse"),  # small, but beyond a small noise
        (-6.0, 3.0, "better"),
        (-1.0, 2.5, "no worse"),  # at most +1.5 %: below the 3 % tolerance
        (+1.0, 1.9, "no worse"),  # at most +2.9 %
        (+1.0, 6.0, "inside the noise"),  # could be +7 %: the run cannot tell
        (-2.0, 9.0, "inside the noise"),
    ],
)
def test_the_verdict(change_percent: float, detectable_percent: float, expected: str) -> None:
    change = math.log1p(change_percent / 100)
    detectable = math.log1p(detectable_percent / 100)
    assert verdict(change, detectable, TOLERANCE) == expected


def test_without_a_control_the_verdict_is_inside_the_noise_whatever_the_change() -> None:
    assert verdict(math.log(1.5), None, TOLERANCE) == "inside the noise"


def test_a_phase_summary_from_measured_pairs() -> None:
    # produce JSON, µs per message: three A/B pairs of an earlier sitting, and five A/A pairs
    ab = [Pair(14.77, 14.03), Pair(14.17, 14.37), Pair(13.70, 14.20)]
    aa = [Pair(11.07, 11.12), Pair(9.45, 10.21), Pair(11.10, 11.12), Pair(10.95, 10.52), Pair(12.00, 11.70)]
    summary = summarize("produce json", ab, aa, tolerance_percent=3.0)
    assert summary.pairs == 3
    assert summary.aa_pairs == 5
    assert summary.old_median == 14.17
    assert summary.new_median == 14.20
    # the pair ratios are 0.950, 1.014, 1.036: their median is 14.37 / 14.17
    assert percent(summary.change) == pytest.approx(1.41, abs=0.01)
    # the A/A ratios: 1.0045, 1.0804, 1.0018, 0.9607, 0.9750 -> median 1.0018
    assert summary.aa_change is not None
    assert percent(summary.aa_change) == pytest.approx(0.18, abs=0.01)
    assert summary.detectable is not None
    # MAD of the A/A logs 0.0271 -> spread 0.0402; 2.776 x 1.2533 x 0.0402 / sqrt(3) = 0.0808 -> 8.4 %
    assert percent(summary.detectable) == pytest.approx(8.4, abs=0.1)
    assert summary.verdict == "inside the noise"


def test_a_summary_refuses_a_phase_without_a_b_pairs_and_has_no_control_without_a_a_pairs() -> None:
    with pytest.raises(ValueError, match="no A/B pair"):
        summarize("consume json", [], [Pair(1.0, 1.0)], tolerance_percent=3.0)
    alone = summarize("consume json", [Pair(13.57, 13.23)], [], tolerance_percent=3.0)
    assert alone.aa_change is None
    assert alone.detectable is None
    assert alone.spread is None
    assert alone.verdict == "inside the noise"


def test_pairs_needed_for_a_target_at_a_given_spread() -> None:
    # 2.776 x 1.2533 x 0.014826 / log(1.03) = 1.745 -> 1.745^2 = 3.04 -> 4 pairs
    assert pairs_needed(0.014826, 5, 3.0) == 4
    # four times the spread needs sixteen times the pairs (less rounding)
    assert pairs_needed(4 * 0.014826, 5, 3.0) == 49
    assert pairs_needed(0.0, 5, 3.0) is None
    assert pairs_needed(0.02, 2, 3.0) is None
