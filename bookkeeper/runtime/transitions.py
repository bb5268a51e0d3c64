"""Executable state machines: a transition table that every change of a state goes through.

A state machine written as scattered assignments (``self.state = X``) documents its moves only in the
reader's head. Here the allowed moves are data: a :class:`TransitionTable` maps each state to the states it
may move to, and :meth:`TransitionTable.check` is called on every change. A move the table does not list is a
bug in this program, never a condition of the outside world, so it raises :class:`IllegalTransitionError`
(an ``AssertionError``: callers do not catch it) naming the machine, the subject, both states and why the
move was attempted. The tables themselves are documented in ``docs/architecture.md`` §3 and tested with
Hypothesis over every (state, input) pair.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

S = TypeVar("S", bound=enum.Enum)


class IllegalTransitionError(AssertionError):
    """A state change that the machine's transition table does not allow (an internal error)."""

    def __init__(
        self,
        machine: str,
        subject: str,
        source: enum.Enum,
        target: enum.Enum,
        why: str,
        allowed: Iterable[str],
    ) -> None:
        self.source = source
        self.target = target
        names = ", ".join(sorted(allowed)) or "nothing (a final state)"
        label = f"{machine} {subject}".strip()
        super().__init__(
            f"internal error: {label}: illegal transition {source.name} -> {target.name} ({why}); "
            f"{source.name} may move to {names}"
        )


class TransitionTable(Generic[S]):
    """The moves a state machine may make: ``{from: {to, ...}}``; a state missing from the keys is final."""

    def __init__(self, machine: str, moves: Mapping[S, Iterable[S]]) -> None:
        self.machine = machine
        self.moves: dict[S, frozenset[S]] = {source: frozenset(targets) for source, targets in moves.items()}

    def allows(self, source: S, target: S) -> bool:
        return target in self.moves.get(source, frozenset())

    def check(self, subject: str, source: S, target: S, why: str) -> S:
        """``target`` if the table allows ``source -> target``; otherwise :class:`IllegalTransitionError`."""
        if not self.allows(source, target):
            allowed = (s.name for s in self.moves.get(source, frozenset()))
            raise IllegalTransitionError(self.machine, subject, source, target, why, allowed)
        return target
