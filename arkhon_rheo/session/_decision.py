"""A human decision on a paused session: checked, and recorded through its journal or itself.

A session kept in memory only (no store) is its own record: `MemoryJournal`
answers for it what a `Journal` answers for a stored one about the gate it is
paused at, and commits an event made outside any stage through the session
itself. Both are a `Ledger`, so a human decision takes one path either way.

**The check.** A decision's updates, event kind and failure are checked here.

`StoredSession` applies it to a stored session and to one paused in memory
alike, so both refuse the same decisions: a resume value that fails its gate
field's validation, an edit that fails validation or an invariant, and an edit
of a field the supervisor owns (it would forge what the supervisor recorded).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .._errors import ConfigurationError, MessageRefused, SessionError, UndeclaredWrite
from ..protocols import (
    SUPERVISOR_FIELDS,
    Abort,
    AgentState,
    Approve,
    Edit,
    ErrorClass,
    EventKind,
    FailureRecord,
    Patch,
    TransitionEvent,
)
from ..protocols._seams import SENSITIVE, sensitive_fields
from ._compiled import compiled
from ._record import ExitReason

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pydantic import BaseModel

    from ..protocols import Machine
    from ._record import Session

__all__ = [
    "DECISIONS",
    "SUPERVISOR_OWNED",
    "Ledger",
    "MemoryJournal",
    "PausedAt",
    "decision_of_message",
    "decision_updates",
    "gate_of",
    "not_paused",
    "out_of_band_event",
    "recorded_decision",
]

#: The decision kinds a session paused at a gate accepts, by name (as mail or a message).
DECISIONS: dict[str, type[BaseModel]] = {"approve": Approve, "abort": Abort, "edit": Edit}


class PausedAt(NamedTuple):
    """A session paused at a gate, as its record has it: what a decision starts from."""

    #: The state it is paused in.
    state: AgentState
    #: The name of the gate it is paused at (``None`` for a pause no gate named).
    gate: str | None
    #: The number the decision's event takes.
    next_seq: int
    #: What a run launched after the decision counts its events from.
    base_seq: int
    #: The events that run keeps in memory before its own (none with a store).
    history: Sequence[TransitionEvent]
    #: What its stored record says it waits for (``None`` in memory, or before records said).
    waiting: Any = None


class Ledger(Protocol):
    """A session's record, for an event made outside any stage: its `Journal` or itself."""

    async def paused(self) -> PausedAt:
        """The gate the session is paused at, and its state there.

        Raises:
            SessionError: If it is not paused.
        """
        ...

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
        waiting: Any = None,
    ) -> None:
        """Commit ``event``, which leads to ``state``; ``status`` is the session's from now on.

        ``applied`` is the inbox position of the decision message it applies (stored only);
        ``waiting``, what the session, still paused, waits for (stored only, in the same write).
        """
        ...


class MemoryJournal:
    """A session kept in memory only (no store), as its own record: a `Journal`'s twin.

    Args:
        session: The session, held by the agent system.
        machine: The machine it must run (`ConfigurationError` otherwise).
    """

    __slots__ = ("session",)

    def __init__(self, session: Session, machine: Machine[Any]) -> None:
        if session.machine.name != machine.name:
            raise ConfigurationError(
                f"session {session.session_id!r} runs machine {session.machine.name!r}, "
                f"not {machine.name!r}"
            )
        self.session = session

    async def paused(self) -> PausedAt:
        """The gate the session is paused at, and its state there.

        Raises:
            SessionError: If it is not paused.
        """
        session = self.session
        reason = session.exit_reason
        if reason is not ExitReason.PAUSED:
            status = "running" if reason is None else reason.value
            raise not_paused(session.session_id, status)
        log = session.log
        return PausedAt(
            session.state,
            gate_of(log[-1] if log else None),
            session.next_seq(),
            session.base_seq,
            log,
        )

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
        waiting: Any = None,
    ) -> None:
        """Commit ``event`` through the session (`Session.commit_out_of_band`).

        ``status`` is the stored record's; in memory the event says it (an event
        that moves the session to its failed state ends it failed).
        """
        self.session.commit_out_of_band(state, event)


def not_paused(session_id: str, status: str) -> SessionError:
    """The error for a decision on a session that is not paused (it is ``status``)."""
    return SessionError(
        f"session {session_id!r} is not paused (it is {status}); "
        "only a session waiting at a gate takes a decision",
        session_id=session_id,
    )


def gate_of(pause: TransitionEvent | None) -> str | None:
    """The name of the gate ``pause`` (a session's last event) paused it at."""
    return ((pause.info if pause else None) or {}).get("gate")


def out_of_band_event(
    session_id: str,
    seq: int,
    kind: EventKind,
    before: AgentState,
    after: AgentState,
    updates: Mapping[str, Any],
    info: dict[str, Any],
    error: FailureRecord | None = None,
) -> TransitionEvent:
    """An event made outside any stage (a rollback, a resume, a human decision)."""
    now = time.time()
    return TransitionEvent(
        session_id=session_id,
        seq=seq,
        kind=kind,
        stage=None,
        from_state=before.lifecycle,
        to_state=after.lifecycle,
        reads=frozenset(),
        writes=frozenset(updates),
        patch=Patch.of(dict(updates)),
        attempt=0,
        started_at=now,
        finished_at=now,
        error=error,
        info=info,
    )


#: The fields a human edit may not write: those every state has, which the
#: supervisor keeps (the lifecycle, the session's id, its loop count, the failure
#: it recorded and the session's metadata).
SUPERVISOR_OWNED = SUPERVISOR_FIELDS | AgentState.base_fields


def decision_updates(
    machine: Machine[Any],
    state: AgentState,
    gate_name: str | None,
    decision: str,
    value: Any,
    edit: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], EventKind, FailureRecord | None]:
    """Check a human decision on ``state``; return its updates, event kind and error."""
    if decision == "abort":
        failure = FailureRecord(
            error_type="Aborted",
            message=f"aborted by a human at gate {gate_name!r}",
            error_class=ErrorClass.FATAL,
            lifecycle=state.lifecycle.name,
            exit_reason="aborted",
        )
        return {"last_error": failure, "lifecycle": machine.failed}, EventKind.FAILURE, failure
    if decision == "approve":
        gate = next((g for g in machine.gates if g.name == gate_name), None)
        if gate is None or gate.field is None:
            if value is not None:
                raise ConfigurationError(f"gate {gate_name!r} takes no resume value")
            fields: dict[str, Any] = {}
        else:
            fields = {gate.field: value}
        writes = frozenset(fields)
    else:
        fields = dict(edit or {})
        writes = frozenset(machine.state_type.model_fields) - SUPERVISOR_OWNED
        if owned := SUPERVISOR_OWNED.intersection(fields):
            # Checked here, not left to the validator: an edit of ``last_error`` or
            # ``metadata`` would forge what the supervisor recorded.
            raise UndeclaredWrite(
                stage="(human)",
                fields=owned,
                writes=writes,
                advice=f"An edit may change the business fields only: the supervisor owns "
                f"{', '.join(sorted(SUPERVISOR_OWNED))} (nothing was written)",
            )
    validator = compiled(machine).validator
    updates, _ = validator.validate(state, Patch.of(fields), stage="(human)", writes=writes)
    validator.check_invariants(state.model_copy(update=updates), state.lifecycle, stage="(human)")
    return updates, EventKind.DECISION, None


def recorded_decision(
    machine: Machine[Any], gate_name: str | None, decision: BaseModel
) -> BaseModel:
    """``decision`` as the inbox keeps it: a value for a `Sensitive` field as ``[SENSITIVE]``.

    The decision's event carries the value in its patch, sealed; the inbox
    message only records that the decision was made.
    """
    hidden = sensitive_fields(machine.state_type)
    if not hidden:
        return decision
    if isinstance(decision, Edit) and not hidden.isdisjoint(decision.fields):
        return Edit(fields={k: SENSITIVE if k in hidden else v for k, v in decision.fields.items()})
    if isinstance(decision, Approve) and decision.value is not None:
        gate = next((g for g in machine.gates if g.name == gate_name), None)
        if gate is not None and gate.field in hidden:
            return Approve(value=SENSITIVE)
    return decision


def decision_of_message(
    machine: Machine[Any], gate_name: str | None, decision: BaseModel, session_id: str
) -> tuple[str, Any, Mapping[str, Any] | None]:
    """The decision's name ("approve", "abort" or "edit"), value and edit, checked."""
    if isinstance(decision, Approve):
        gate = next((g for g in machine.gates if g.name == gate_name), None)
        value = decision.value
        if gate is not None and value is not None:
            value = gate.check_answer(value, session_id=session_id)
        return "approve", value, None
    if isinstance(decision, Abort):
        return "abort", None, None
    if isinstance(decision, Edit):
        return "edit", None, decision.fields
    raise MessageRefused(
        f"a session paused at a gate takes a decision (Approve, Abort or Edit), got "
        f"{type(decision).__name__}; nothing was stored",
        session_id=session_id,
    )
