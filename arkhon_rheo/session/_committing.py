"""A step's commit: validate a stage's patch, write it ahead to the store, then land it.

The supervisor's (`SessionSupervisor`, ``_supervisor.py``) half that checks and
commits: `Committing._commit` validates the patch, checks the move and the
target state, builds the event and, with a store, hands the write to
`Persistence.write`; the supervisor's step awaits that write itself (no
coroutine of the commit's, nor of the store's, alive while hundreds of commits
wait for one transaction) and lands the commit (`Committing._land`) once it is
stored.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from .._errors import ArkhonError, IllegalTransition, PreconditionFailed
from ..core._seams import step_moves
from ..protocols import ErrorClass, EventKind, Patch
from ._commit_rule import check_edge, check_invariants, state_label
from ._compiled import with_fields
from ._record import ExitReason, failure_record

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ..protocols import AgentState, FailureRecord, Stage, TransitionEvent
    from ..protocols._seams import ScheduledMessage
    from ._compiled import StatePlan
    from ._inbox import Delivery, Inbox
    from ._persist import Mail
    from ._record import Session

__all__ = ["Committing"]

_set = object.__setattr__


def _illegal_transition(
    stage: str, lifecycle: enum.Enum, target: object, plan: StatePlan
) -> IllegalTransition:
    """The refusal of a move from ``lifecycle`` to ``target`` that ``plan`` does not allow."""
    return IllegalTransition(
        stage=stage,
        from_state=state_label(lifecycle),
        to_state=state_label(target) if isinstance(target, enum.Enum) else repr(target),
        allowed=[state_label(s) for s in plan.allowed],
    )


def _info(calls: list[dict[str, Any]] | None, mail: Mail | None) -> dict[str, Any] | None:
    """A step event's ``info``: the calls it made (``"io"``), the message and timers of its mail."""
    info = {"io": calls} if calls else None
    if mail is not None:
        info = {**(info or {}), **mail.info}
    return info


def _chosen_failure(
    stage: str, lifecycle: enum.Enum, target: enum.Enum, attempt: int
) -> FailureRecord:
    """The record of a stage that moved its session to a failed state itself."""
    return failure_record(
        "StageChoseFailure",
        f"stage {stage!r} moved the session to {state_label(target)!r}",
        ErrorClass.FATAL,
        stage=stage,
        lifecycle=lifecycle,
        attempt=attempt,
        reason=ExitReason.FAILED,
    )


class Committing:
    """The commit of a step, mixed into the supervisor (which sets these attributes)."""

    session: Session
    inbox: Inbox
    #: The state the last commit checked against the invariants of its lifecycle.
    verified: AgentState | None
    #: The plan of the state the last commit moved the session to.
    landed: StatePlan
    #: A durable commit's write, for the step to await (no coroutine of its own
    #: alive while it waits), and what the commit lands once it is stored.
    _writing: Awaitable[object] | None
    #: The candidate state (``None``: no commit waits), its event, plan and records:
    #: attributes, not a tuple of them for the GC to walk while the commit waits.
    _landing: AgentState | None
    _landing_event: TransitionEvent | None
    _landing_to: StatePlan
    _landing_verified: AgentState | None
    _landing_record: FailureRecord | None

    def _refusal(self, state: AgentState, plan: StatePlan, name: str) -> ArkhonError | None:
        """Why ``state`` may not run stage ``name`` (an invariant, a precondition), if so."""
        try:
            if plan.invariants and state is not self.verified:
                check_invariants(plan.invariants, state, state.lifecycle, stage=name)
            for condition in plan.preconditions:
                try:
                    holds = condition.holds(state)
                except Exception as exc:
                    raise PreconditionFailed(
                        stage=name, condition=f"{condition.name} (the check raised {exc!r})"
                    ) from exc
                if not holds:
                    raise PreconditionFailed(stage=name, condition=condition.name)
        except ArkhonError as refused:
            return refused
        return None

    def _commit(
        self,
        state: AgentState,
        patch: Patch,
        stage: Stage[Any],
        started: float,
        attempt: int,
        calls: list[dict[str, Any]] | None = None,
        plan: StatePlan | None = None,
        delivery: Delivery | None = None,
        timers: list[ScheduledMessage] | None = None,
    ) -> Exception | None:
        """Validate and commit one stage's patch; return the refusal instead of raising.

        ``plan`` is the compiled plan of ``state``'s lifecycle, when the caller has it;
        ``delivery`` the message the step applied and ``timers`` those it set, if any.
        With a store, the write is left in `_writing` for the caller to await, then `_land`.
        """
        session = self.session
        machine = session.machine
        name = stage.name
        lifecycle = state.lifecycle
        if plan is None:
            plan = session.compiled.plan(lifecycle)
        try:  # (a timer's sensitive fields, without a keyring, refuse the step)
            mail = self.inbox.mail(delivery, timers)
            updates, patch, written = session.validator._validated(
                state, patch, stage=name, writes=stage.writes
            )
            written = plan.shared_writes(written)
            candidate = session.compiled.copy_with(state, updates)
            target = stage.next(candidate)
            # Identity, not equality: a str-valued enum's member of another enum, or a
            # bare string, may compare equal to an allowed state without being one.
            # The plan's targets are keyed by the identity of the allowed states.
            to = plan.targets.get(id(target))
            if to is None:
                raise _illegal_transition(name, lifecycle, target, plan)
            # The stage's own decision to fail: still a structured record.
            record = _chosen_failure(name, lifecycle, target, attempt) if to.failed else None
            moved = step_moves(machine, state, lifecycle, target, record, updates)
            # The candidate is still private to this call: set the moves on it
            # rather than copying the state a second time.
            candidate.__dict__.update(moved)
            share = session.compiled.frozen
            _set(candidate, "__pydantic_fields_set__", with_fields(candidate, moved, share=share))
            verified = None
            if record is None:
                if to.invariants:
                    check_invariants(to.invariants, candidate, target, stage=name)
                verified = candidate
                if (edge := plan.edge_checks.get(id(target))) is not None:
                    check_edge(edge, state, candidate, stage=name)
        except Exception as exc:
            return exc
        event = session.event(
            EventKind.STEP,
            name,
            lifecycle,
            target,
            patch,
            written,
            attempt,
            reads=stage.reads,
            started_at=started,
            error=record,
            info=_info(calls, mail),
        )
        if (persistence := session.persistence) is not None:
            try:  # write-ahead: `_step` awaits it, with no coroutine of this call alive
                self._writing = persistence.write(event, candidate, mail=mail)
            except Exception as exc:
                return exc
            self._landing, self._landing_event, self._landing_to = candidate, event, to
            self._landing_verified, self._landing_record = verified, record
            return None
        if mail is not None:
            return self.inbox.unstored()  # a timer, without a store to keep it
        self._apply(candidate, event, to, verified, record)
        return None

    def _land(self) -> Exception | None:
        """The durable write `_step` awaited returned: land its commit, or return the refusal."""
        candidate, self._landing = self._landing, None
        persistence = self.session.persistence
        assert candidate is not None
        assert persistence is not None
        try:
            persistence.accept()  # the store's refusal, if any, is raised here
        except Exception as exc:
            return exc
        event, self._landing_event = self._landing_event, None
        assert event is not None
        self._apply(
            candidate, event, self._landing_to, self._landing_verified, self._landing_record
        )
        return None

    def _unwaited(self, exc: BaseException) -> Exception:
        """The durable write's wait raised ``exc``: return it (a refusal) or re-raise it."""
        self._landing = self._landing_event = None
        persistence = self.session.persistence
        assert persistence is not None
        persistence.abandon()  # cancelled: the write is committed all the same (or logged)
        if isinstance(exc, Exception):
            return exc
        raise exc

    def _apply(
        self,
        candidate: AgentState,
        event: TransitionEvent,
        to: StatePlan,
        verified: AgentState | None,
        record: FailureRecord | None,
    ) -> None:
        """The commit is authoritative: the session moves to ``candidate``."""
        session = self.session
        if record is not None:
            session.failure = record
        session.applies = None  # applied by this commit, if it was due
        session.commit(candidate, event)
        self.verified = verified
        self.landed = to
