"""The transition tables of the ledger metadata and of the managed ledger, over every (state, input) pair.

Each table is data (:class:`~magnetar.bookkeeper.runtime.transitions.TransitionTable`); these tests pin it to
the rules of docs/architecture.md §3 and check that the code paths that change a state refuse a move the
table does not list, with an internal error that names the machine, both states and the reason.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.client.metadata import LEDGER_STATE_MOVES, LedgerMetadata, LedgerState
from magnetar.bookkeeper.runtime.transitions import IllegalTransitionError
from magnetar.managed_ledger import ledger_state
from magnetar.managed_ledger.ledger_state import MOVES, STOPPED, WRITABLE, State

LEDGER_RULE_4 = {
    (LedgerState.OPEN, LedgerState.IN_RECOVERY),
    (LedgerState.OPEN, LedgerState.CLOSED),
    (LedgerState.IN_RECOVERY, LedgerState.CLOSED),
}


@given(st.sampled_from(LedgerState), st.sampled_from(LedgerState))
def test_ledger_metadata_moves_are_exactly_rule_4(source: LedgerState, target: LedgerState) -> None:
    assert LEDGER_STATE_MOVES.allows(source, target) == ((source, target) in LEDGER_RULE_4)


def _metadata(state: LedgerState, last: int = -1, length: int = 0) -> LedgerMetadata:
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        3,
        2,
        2,
        ((0, ("a:1", "b:1", "c:1")),),
        state=state,
        last_entry_id=last if closed else -1,
        length=length if closed else 0,
    )


OPERATIONS = st.one_of(
    st.just(("in_recovery", -1, 0)),
    st.tuples(st.just("closed"), st.integers(-1, 2**63 - 1), st.integers(0, 2**63 - 1)),
)


@given(st.sampled_from(LedgerState), OPERATIONS)
def test_metadata_derivations_obey_the_table(state: LedgerState, op: tuple[str, int, int]) -> None:
    md = _metadata(state, 4, 40)
    name, last, length = op
    target = LedgerState.IN_RECOVERY if name == "in_recovery" else LedgerState.CLOSED
    if LEDGER_STATE_MOVES.allows(state, target):
        new = md.in_recovery() if name == "in_recovery" else md.closed(last, length)
        assert new.state is target
        md.check_successor(7, new)  # what the update loop checks before its compare-and-set
    else:
        with pytest.raises(IllegalTransitionError) as caught:
            md.in_recovery() if name == "in_recovery" else md.closed(last, length)
        message = str(caught.value)
        assert f"{state.name} -> {target.name}" in message
        assert "internal error" in message
        assert caught.value.source is state
        assert caught.value.target is target


@given(st.sampled_from(LedgerState), st.sampled_from(LedgerState), st.integers(-1, 10), st.integers(0, 99))
def test_every_compare_and_set_is_checked(
    source: LedgerState, target: LedgerState, last: int, length: int
) -> None:
    old, new = _metadata(source, 4, 40), _metadata(target, last, length)
    same_end = (last, length) == (4, 40)
    legal = LEDGER_STATE_MOVES.allows(source, target) or (
        source is target and (source is not LedgerState.CLOSED or same_end)
    )
    if legal:
        old.check_successor(9, new)
    else:
        with pytest.raises(IllegalTransitionError, match="of ledger 9"):
            old.check_successor(9, new)


def test_a_closed_ledger_is_final_and_its_end_never_moves() -> None:
    closed = _metadata(LedgerState.CLOSED, 4, 40)
    with pytest.raises(IllegalTransitionError, match=r"CLOSED -> CLOSED \(closing at entry 5.*final state"):
        closed.closed(5, 50)
    with pytest.raises(IllegalTransitionError, match="end moved from entry 4 to 3"):
        closed.check_successor(1, _metadata(LedgerState.CLOSED, 3, 30))


# -- the managed ledger -----------------------------------------------------------------------------------


@given(st.sampled_from(State), st.sampled_from(State), st.text(max_size=20))
def test_managed_ledger_moves(source: State, target: State, why: str) -> None:
    if MOVES.allows(source, target):
        assert ledger_state.move("t/ns/x", source, target, why) is target
    else:
        with pytest.raises(IllegalTransitionError) as caught:
            ledger_state.move("t/ns/x", source, target, why)
        message = str(caught.value)
        assert message.startswith("internal error: managed ledger t/ns/x: illegal transition")
        assert f"{source.name} -> {target.name} ({why})" in message


@given(st.sampled_from(State))
def test_stopped_states_never_write_again(source: State) -> None:
    reachable = MOVES.moves.get(source, frozenset())
    if source in STOPPED:
        assert not reachable & WRITABLE  # fenced, terminated and closed never become writable
    assert State.CLOSED in reachable or source is State.CLOSED  # every state can be closed
    assert not MOVES.moves[State.CLOSED]


@given(st.booleans(), st.booleans())
def test_initial_state(has_current: bool, terminated: bool) -> None:
    state = ledger_state.initial_state(has_current, terminated)
    if terminated:
        assert state is State.TERMINATED
    else:
        assert state is (State.LEDGER_OPENED if has_current else State.WRITE_FAILED)


def test_every_state_is_in_the_table() -> None:
    assert set(MOVES.moves) == set(State)
    assert set(LEDGER_STATE_MOVES.moves) == set(LedgerState)


def _state_writers(module: object, attribute: str) -> set[str]:
    """The functions of ``module`` that assign ``self.<attribute>`` or pass ``<attribute>=`` to replace()."""
    source = Path(inspect.getfile(module)).read_text()  # type: ignore[arg-type]
    found: set[str] = set()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == attribute for t in targets):
                    found.add(fn.name)
            is_replace = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "replace"
            if is_replace and any(k.arg == attribute for k in node.keywords):  # type: ignore[attr-defined]
                found.add(fn.name)
    return found


def test_every_state_change_goes_through_the_table() -> None:
    from magnetar.bookkeeper.client import metadata
    from magnetar.managed_ledger import ledger

    assert _state_writers(ledger, "state") == {"__init__", "_move"}
    from magnetar.managed_ledger import add_pipeline, cursor_registry, ledger_metadata, ledger_switch, trimmer

    for collaborator in (add_pipeline, ledger_switch, ledger_metadata, cursor_registry, trimmer):
        assert _state_writers(collaborator, "state") == set(), collaborator.__name__  # through ledger._move
    assert _state_writers(metadata, "state") == {"in_recovery", "closed"}
