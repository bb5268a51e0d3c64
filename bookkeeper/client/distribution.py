"""Round-robin striping and quorum arithmetic (BookKeeper's ``RoundRobinDistributionSchedule``).

* The write set of entry ``e`` in an ensemble of E bookies is ``[(e + i) % E for i < WQ]``; only E distinct
  write sets exist (one per starting index).
* An add succeeds once AQ bookies of its write set acknowledged a durable write.
* Quorum coverage (``RRQuorumCoverageSet.checkCovered``, docs/upstream.md, BookKeeper §3 step 3): a set of
answers *covers* the ensemble when, for every one of the E write sets, fewer than AQ of its bookies are
unanswered or answered with an error. That guarantees no AQ-subset of any write set is entirely unfenced, so
no add of the old writer can still reach AQ. For E == WQ this is "at least E - AQ + 1 answers".
* Recovery reads declare an entry absent only on ``WQ - AQ + 1`` explicit NoSuchEntry/NoSuchLedger answers
  from its write set (``requiredBookiesMissingEntryForRecovery``).
"""

from __future__ import annotations

from collections.abc import Collection


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indices that store ``entry_id``, in BookKeeper's order."""
    return [(entry_id + i) % ensemble_size for i in range(write_quorum)]


def is_covered(ensemble_size: int, write_quorum: int, ack_quorum: int, covered: Collection[int]) -> bool:
    """True when every write set has fewer than ``ack_quorum`` bookies outside ``covered``."""
    for start in range(ensemble_size):
        unknown = sum(1 for i in range(write_quorum) if (start + i) % ensemble_size not in covered)
        if unknown >= ack_quorum:
            return False
    return True


def negative_answers_needed(write_quorum: int, ack_quorum: int) -> int:
    """NoSuchEntry answers from an entry's write set that prove it was never acknowledged."""
    return write_quorum - ack_quorum + 1
