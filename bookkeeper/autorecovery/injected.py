"""Test-only switches that re-introduce known AutoRecovery defects, so tests can prove that the simulation's
checkers catch them. Nothing outside tests may set :data:`INJECTED_BUGS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class InjectedBugs:
    keep_marks_of_deleted_ledgers: bool = False
    """BookKeeper #3316: a mark whose ledger was deleted is released and retried forever, never dropped."""
    keep_marks_of_returned_bookies: bool = False
    """BookKeeper #2766: a bookie that comes back does not end its ledgers' marks, and a worker that finds
    nothing to replicate leaves the mark in place."""
    read_lac_from_failed_bookie: bool = False
    """BookKeeper #2755: before recovering an open ledger the worker reads its LAC from every bookie of the
    last ensemble and gives up when one (the failed one) does not answer."""


INJECTED_BUGS = InjectedBugs()
