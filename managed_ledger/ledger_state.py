"""The managed ledger's state machine (Pulsar's ``ManagedLedgerImpl.State``), as a transition table.

States:

* ``LEDGER_OPENED`` - adds go to the current ledger.
* ``CLOSING_LEDGER`` - a rollover switches ledgers: the next one is listed, the current one is being closed;
  adds queue.
* ``CREATING_LEDGER`` - after a failed add, a new ledger is being created and listed; adds queue.
* ``WRITE_FAILED`` - an add failed (or no ledger could be opened): the next add starts a new ledger.
* ``TERMINATED`` - no more writes ever; readers reach the end of the topic.
* ``FENCED`` - another owner took the topic over (a fenced ledger, a lost compare-and-set): no more writes.
* ``CLOSED`` - closed by its owner; final.

Every change of :attr:`ManagedLedger.state <magnetar.managed_ledger.ledger.ManagedLedger.state>` goes through
:func:`move`, which checks :data:`MOVES`; the initial state is chosen by :func:`initial_state`. The table is
drawn in ``docs/architecture.md`` §3.
"""

from __future__ import annotations

import enum

from magnetar.bookkeeper.runtime import TransitionTable


class State(enum.Enum):
    LEDGER_OPENED = "LedgerOpened"
    CLOSING_LEDGER = "ClosingLedger"
    CREATING_LEDGER = "CreatingLedger"
    WRITE_FAILED = "WriteFailed"
    TERMINATED = "Terminated"
    FENCED = "Fenced"
    CLOSED = "Closed"


WRITABLE = {State.LEDGER_OPENED, State.CLOSING_LEDGER, State.CREATING_LEDGER, State.WRITE_FAILED}
"""States in which adds are taken (sent or queued)."""

STOPPED = frozenset({State.FENCED, State.CLOSED, State.TERMINATED})
"""States in which this instance never writes again."""

_END = {State.TERMINATED, State.FENCED, State.CLOSED}

MOVES: TransitionTable[State] = TransitionTable(
    "managed ledger",
    {
        # an add fails; a rollover starts its switch; a ledger is created without one (none current)
        State.LEDGER_OPENED: {State.WRITE_FAILED, State.CLOSING_LEDGER, State.CREATING_LEDGER, *_END},
        # the switch is done (the next ledger is current) or it failed
        State.CLOSING_LEDGER: {State.LEDGER_OPENED, State.WRITE_FAILED, *_END},
        # the new ledger is current, or creating it failed
        State.CREATING_LEDGER: {State.LEDGER_OPENED, State.WRITE_FAILED, *_END},
        # a new ledger is started (by the next add, or by a rollover begun before the failure), or it fails
        # again
        State.WRITE_FAILED: {State.WRITE_FAILED, State.CREATING_LEDGER, State.CLOSING_LEDGER, *_END},
        # a terminated ledger's metadata can still lose a compare-and-set (properties), and it is closed
        State.TERMINATED: {State.FENCED, State.CLOSED},
        State.FENCED: {State.CLOSED},
        State.CLOSED: set(),
    },
)


def initial_state(has_current_ledger: bool, terminated: bool) -> State:
    """The state of a managed ledger just opened."""
    if terminated:
        return State.TERMINATED
    return State.LEDGER_OPENED if has_current_ledger else State.WRITE_FAILED


def move(name: str, source: State, target: State, why: str) -> State:
    """``target`` if :data:`MOVES` allows ``source -> target``, else an internal error naming both."""
    return MOVES.check(name, source, target, why)
