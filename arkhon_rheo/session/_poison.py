"""Poison sessions: a session claimed again and again without a commit is failed.

A step that kills the process running it (``os._exit``, a signal, the memory
killer) leaves its session "running" with nothing committed; the next claim
resumes it (a ``RESUME`` event) and runs the step again, forever. Every claim
of a worker records that ``RESUME`` event, and every commit is another event,
so the ``RESUME`` events after the session's last other event count the claims
since its last commit. A worker past its limit fails the session instead (a
``FAILURE`` event, error type ``PoisonSession``): no schema change, no counter
to keep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import PoisonSession
from ..protocols import ErrorClass, EventKind, FailureRecord

if TYPE_CHECKING:
    from ..protocols import AgentState, Machine, SessionRecord
    from ._journal import Journal

__all__ = ["check_poison", "claims_without_progress", "fail_poisoned"]


async def claims_without_progress(journal: Journal, record: SessionRecord, anchor: int) -> int:
    """How many claims (``RESUME`` events) follow the session's last commit, event ``anchor``.

    Only the events after ``anchor`` are read, and only if there are any.
    """
    if record.last_seq <= anchor:
        return 0
    events = await journal.history(after=anchor)
    return sum(1 for event in events if event.kind is EventKind.RESUME)


async def fail_poisoned(
    journal: Journal,
    record: SessionRecord,
    state: AgentState,
    machine: Machine[Any],
    *,
    claims: int,
    stage: str | None,
) -> PoisonSession:
    """Fail the session, claimed ``claims`` times without a commit; return why, to raise.

    The ``FAILURE`` event moves it to the machine's failed state with a
    `FailureRecord` (error type ``PoisonSession``) naming the count and
    ``stage``, the stage in flight, and stores it ``"failed"``.
    """
    error = PoisonSession(session_id=journal.session_id, claims=claims, stage=stage)
    failure = FailureRecord(
        error_type="PoisonSession",
        message=str(error),
        error_class=ErrorClass.FATAL,
        stage=stage,
        lifecycle=state.lifecycle.name,
        attempt=claims,
        exit_reason="poison",
    )
    updates = {"last_error": failure, "lifecycle": machine.failed}
    await journal.append(
        record,
        EventKind.FAILURE,
        state,
        state.model_copy(update=updates),
        updates,
        info={"poison": {"claims": claims, "stage": stage}},
        status="failed",
        error=failure,
    )
    return error


async def check_poison(
    journal: Journal, record: SessionRecord, state: AgentState, anchor: int, limit: int
) -> None:
    """Fail the session and raise `PoisonSession` if ``limit`` claims follow its last commit.

    Called by a worker's resume of a session stored "running" (its driver
    stopped without a word) in ``state``, whose last commit is event ``anchor``,
    before this claim's ``RESUME`` event is recorded.

    Raises:
        PoisonSession: If it was failed.
    """
    claims = await claims_without_progress(journal, record, anchor)
    if claims >= limit:
        machine = journal.machine
        stage = machine.stages.get(state.lifecycle)
        name = stage.name if stage is not None else None
        raise await fail_poisoned(journal, record, state, machine, claims=claims, stage=name)
