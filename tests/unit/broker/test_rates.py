"""Stats rates: per-second averages of growing counters over the last period."""

from __future__ import annotations

from magnetar.broker.core.rates import Rate


def test_a_rate_is_the_growth_of_the_last_period_divided_by_its_length() -> None:
    rate = Rate()
    assert (rate.msgs_per_s, rate.bytes_per_s) == (0.0, 0.0)
    rate.update(120, 12_000, 60.0)  # counted from zero since the object was created
    assert (rate.msgs_per_s, rate.bytes_per_s) == (2.0, 200.0)
    rate.update(150, 15_000, 10.0)
    assert (rate.msgs_per_s, rate.bytes_per_s) == (3.0, 300.0)


def test_a_quiet_period_brings_the_rate_back_to_zero() -> None:
    rate = Rate()
    rate.update(10, 100, 1.0)
    rate.update(10, 100, 1.0)
    assert (rate.msgs_per_s, rate.bytes_per_s) == (0.0, 0.0)


def test_counters_that_went_backwards_give_zero_not_a_negative_rate() -> None:
    rate = Rate()
    rate.update(10, 100, 1.0)
    rate.update(4, 40, 1.0)
    assert (rate.msgs_per_s, rate.bytes_per_s) == (0.0, 0.0)
    rate.update(6, 60, 2.0)
    assert (rate.msgs_per_s, rate.bytes_per_s) == (1.0, 10.0)
