"""A human decision on a paused session, checked: its updates, event kind and failure.

`StoredSession` applies it to a stored session and to one paused in memory
alike, so both refuse the same decisions: a resume value that fails its gate
field's validation, an edit that fails validation or an invariant, and an edit
of a field the supervisor owns (it would forge what the supervisor recorded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, MessageRefused, UndeclaredWrite
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
)
from ..protocols._seams import SENSITIVE, sensitive_fields
from ._compiled import compiled

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from ..protocols import Machine

__all__ = ["SUPERVISOR_OWNED", "decision_of_message", "decision_updates", "recorded_decision"]

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
