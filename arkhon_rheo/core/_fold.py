"""The fold: the state a session's events lead to, by the rule the supervisor commits by.

Folding a session's events on its initial state (or on a snapshot, with the
events after it) gives the state the supervisor committed, because both use
`step_moves`: the supervisor's derived changes (the lifecycle move, the
iteration count, a stage's own failure record) follow from the event alone.
A resume, a fork, a rollback and replay verification all fold this way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..protocols import EventKind, History

if TYPE_CHECKING:
    import enum
    from collections.abc import Container, Iterable

    from ..protocols import AgentState, FailureRecord, Machine, TransitionEvent

__all__ = ["apply_event", "fold", "step_moves"]


def apply_event(machine: Machine[Any], state: AgentState, event: TransitionEvent) -> AgentState:
    """The state after ``event``: its patch, plus the moves the supervisor derives.

    The patch's values must already be validated (they are, in events the
    supervisor made and in events a codec decoded).
    """
    updates: dict[str, Any] = dict(event.patch.values)
    for name, items in event.patch.appends.items():
        current = getattr(state, name)
        updates[name] = (
            current.append(*items)
            if isinstance(current, History)
            else (
                *current,
                *items,
            )
        )
    if event.kind is EventKind.STEP:
        updates.update(
            step_moves(machine, state, event.from_state, event.to_state, event.error, updates)
        )
    return state.model_copy(update=updates)


def step_moves(
    machine: Machine[Any],
    state: AgentState,
    from_state: enum.Enum,
    to_state: enum.Enum,
    error: FailureRecord | None,
    written: Container[str],
) -> dict[str, Any]:
    """What the supervisor itself changes on a step, besides the stage's patch.

    The lifecycle moves; entering the loop state from another counts an
    iteration; a stage that chose the failed state leaves its record in
    ``last_error`` unless it wrote that field itself. The supervisor and
    `apply_event` both use this, so a fold cannot drift from a commit.
    """
    moves: dict[str, Any] = {"lifecycle": to_state}
    if to_state is machine.loop_state and from_state is not to_state:
        moves["iteration"] = state.iteration + 1
    if error is not None and "last_error" not in written:
        moves["last_error"] = error
    return moves


def fold(machine: Machine[Any], state: AgentState, events: Iterable[TransitionEvent]) -> AgentState:
    """Apply ``events`` in order to ``state`` (a snapshot) and return the result.

    ::

        state = fold(machine, initial_state, await system.stored(machine, session_id).history())
    """
    for event in events:
        state = apply_event(machine, state, event)
    return state
