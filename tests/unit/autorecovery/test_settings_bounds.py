"""Every AutoRecovery limit is bounded: a value past its bound is refused with the setting's name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings

TOO_LARGE = {
    "lost_bookie_recovery_delay_s": 86_401,
    "auditor_periodic_check_interval_s": 366 * 86_400 + 1,
    "auditor_periodic_bookie_check_interval_s": 366 * 86_400 + 1,
    "auditor_periodic_placement_policy_check_interval_s": 366 * 86_400 + 1,
    "open_ledger_rereplication_grace_period_ms": 86_400_001,
    "rereplication_rate_bytes_per_s": 10 * 2**30 + 1,
    "rereplication_rate_entries_per_s": 10_000_001,
    "rereplicate_backoff_ms": 3_600_001,
    "lock_release_of_failed_ledger_grace_period_ms": 86_400_001,
    "underreplicated_poll_ms": 3_600_001,
    "add_timeout_ms": 600_001,
    "read_timeout_ms": 600_001,
}


@pytest.mark.parametrize(("name", "value"), sorted(TOO_LARGE.items()))
def test_a_value_past_the_bound_is_refused_by_name(name: str, value: int) -> None:
    with pytest.raises(ValidationError, match=name):
        AutoRecoverySettings.model_validate({name: value})
    accepted = AutoRecoverySettings.model_validate({name: value - 1})
    assert getattr(accepted, name) == value - 1


def test_every_integer_limit_has_an_upper_bound() -> None:
    unbounded = [
        name
        for name, field in AutoRecoverySettings.model_fields.items()
        if field.annotation is int and not any(getattr(m, "le", None) is not None for m in field.metadata)
    ]
    assert unbounded == []
    assert "add_timeout_ms" in AutoRecoverySettings.model_fields
