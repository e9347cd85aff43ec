"""What a failed step does: retry it, restart its stages, record it, or end the session.

The session's classifier sorts each failure of a step (a stage's error, a
refused patch, a precondition that does not hold) into transient, recoverable
or fatal. A transient failure is retried after a backoff, up to the backoff's
attempts, then counts as recoverable. A recoverable one restarts the stages
the restart strategy names (beyond the restart intensity it is fatal: its
record keeps its type and message and says the intensity ran out) and is
recorded in the state's ``last_error``, following the machine's error route
from the current state if there is one. A fatal one moves the session to its
failed state. Each recorded failure is committed as a `FAILURE` event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ArkhonError, LeaseLost, RestartIntensityExceeded, StoreUnavailable, Transient
from .._log import get_logger
from ..protocols import ErrorClass, EventKind, Patch
from ._persist import Mail
from ._record import ExitReason, failure_record
from ._subgraph import applied_info

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..protocols import FailureRecord
    from ._policy import RestartWindow
    from ._record import Session

__all__ = ["FailureHandler"]

_logger = get_logger("arkhon_rheo.supervision")


class FailureHandler:
    """Handles the failures of one session's steps, for its supervisor.

    Args:
        session: The session.
    """

    __slots__ = ("session", "window")

    def __init__(self, session: Session) -> None:
        self.session = session
        #: The restarts within the restart intensity's window.
        self.window: RestartWindow = session.config.restart_intensity.window()

    async def retry(self, failure: Exception, stage: str, attempt: int) -> ErrorClass | None:
        """Classify a failed attempt; if it is to be tried again, wait out its backoff.

        Returns:
            ``None`` once the backoff has passed (the caller runs the next
            attempt), else how the failure is to be handled: a transient failure
            that used up its attempts counts as recoverable.
        """
        session = self.session
        if type(failure) is LeaseLost:  # never retried: another owner drives it now
            return ErrorClass.FATAL
        if isinstance(failure, StoreUnavailable):  # its commit may have landed: never retried
            return ErrorClass.FATAL
        error_class = session.config.classifier.classify(failure)
        if error_class is not ErrorClass.TRANSIENT:
            return error_class
        backoff = session.config.backoff
        if attempt >= backoff.max_attempts:
            return ErrorClass.RECOVERABLE
        hint = failure.retry_after if isinstance(failure, Transient) else None
        delay = backoff.delay(attempt, session.rng, at_least=hint)
        _logger.info(
            "stage_retrying",
            session_id=session.session_id,
            stage=stage,
            attempt=attempt + 1,
            delay=delay,
            error=repr(failure),
        )
        await anyio.sleep(delay)
        session.retries += 1
        return None

    def lease_lost(self, error: LeaseLost, stage: str, attempt: int) -> bool:
        """Another owner took the session: stop at once, writing nothing more; it has ended.

        No failure event, no status and no release is written: the session is its
        new owner's (`Persistence.lost` keeps the supervisor's stop from writing).
        """
        session = self.session
        session.lease_taken()
        session.failure = failure_record(
            type(error).__name__,
            str(error),
            ErrorClass.FATAL,
            stage=stage,
            attempt=attempt,
            lifecycle=session.state.lifecycle,
            reason=ExitReason.LEASE_LOST,
        )
        _logger.error(
            "session_lease_lost",
            session_id=session.session_id,
            owner=error.owner,
            holder=error.holder,
            stage=stage,
        )
        return True

    def store_unavailable(self, error: StoreUnavailable, stage: str, attempt: int) -> bool:
        """The store dropped the connection under a step: stop here, the session not failed.

        Whether the step's commit landed is unknown, and the store may be out of
        reach: the run stops as a handoff does (`Session.handoff`), writing no
        failure and no status, its record left ``"running"`` and its lease given up
        if the store takes the release (else it runs out). A worker then claims the
        session (or `AgentSystem.resume` continues it) from its last commit; the
        step runs again unless its commit landed.
        """
        session = self.session
        session.handoff = True
        session.failure = failure_record(
            type(error).__name__,
            str(error),
            ErrorClass.TRANSIENT,
            stage=stage,
            attempt=attempt,
            lifecycle=session.state.lifecycle,
            reason=ExitReason.CANCELLED,
        )
        session.finish(ExitReason.CANCELLED)
        _logger.warning(
            "session_store_unavailable",
            session_id=session.session_id,
            stage=stage,
            error=str(error),
        )
        return True

    async def failed(
        self,
        error: Exception,
        stage: str,
        attempt: int,
        restart: Callable[[str], Awaitable[None]],
        error_class: ErrorClass | None = None,
    ) -> bool:
        """Handle a failure of ``stage`` (classified, without ``error_class``).

        ``restart`` restarts the stages a recoverable failure of ``stage`` affects.

        Returns:
            Whether the session ended.
        """
        session = self.session
        if type(error) is LeaseLost:
            return self.lease_lost(error, stage, attempt)
        if isinstance(error, StoreUnavailable) and session.persistence is not None:
            return self.store_unavailable(error, stage, attempt)
        if error_class is None:
            error_class = session.config.classifier.classify(error)
        message = str(error)
        if error_class is ErrorClass.RECOVERABLE:
            if not self.window.allow(anyio.current_time()):
                # Escalated: the record keeps the error (type, message), and says why it ended.
                intensity = session.config.restart_intensity
                ran_out = RestartIntensityExceeded(
                    stage=stage, restarts=intensity.max_restarts, window=intensity.within
                )
                message = f"{message} [{ran_out.NOTE}: {ran_out}]"
                error_class = ErrorClass.FATAL
            else:
                await restart(stage)
                await self._recover(error, stage, attempt)
                return False
        await self.fail(
            type(error).__name__,
            message,
            stage=stage,
            attempt=attempt,
            error_class=error_class,
            reason=ExitReason.FAILED,
        )
        return True

    async def _recover(self, exc: Exception, stage: str, attempt: int) -> None:
        """Record a recoverable error in the state; follow the error route if there is one."""
        session = self.session
        state = session.state
        lifecycle = state.lifecycle
        record = failure_record(
            type(exc).__name__,
            str(exc),
            ErrorClass.RECOVERABLE,
            stage=stage,
            lifecycle=lifecycle,
            attempt=attempt,
        )
        machine = session.machine
        target = machine.error_routes.get(lifecycle, lifecycle)
        updates: dict[str, Any] = {"last_error": record}
        if target is not lifecycle:
            updates["lifecycle"] = target
            if target is machine.loop_state:
                updates["iteration"] = state.iteration + 1
            try:
                candidate = state.model_copy(update=updates)
                session.validator.check_invariants(candidate, target, stage=stage)
                session.validator.check_transition(state, candidate, stage=stage)
            except ArkhonError as violation:
                _logger.error(
                    "error_route_refused", session_id=session.session_id, error=repr(violation)
                )
                updates = {"last_error": record}
        await self._commit(updates, record, stage, attempt)
        session.steps += 1

    async def fail(
        self,
        error_type: str,
        message: str,
        *,
        stage: str | None,
        attempt: int,
        error_class: ErrorClass,
        reason: ExitReason,
    ) -> None:
        """Move the session to the failed state with a structured record."""
        session = self.session
        record = failure_record(
            error_type,
            message,
            error_class,
            stage=stage,
            lifecycle=session.state.lifecycle,
            attempt=attempt,
            reason=reason,
        )
        updates = {"last_error": record, "lifecycle": session.machine.failed}
        await self._commit(updates, record, stage, attempt)
        session.failure = record
        _logger.warning(
            "session_failed",
            session_id=session.session_id,
            stage=stage,
            error_type=error_type,
            reason=reason.value,
        )
        session.finish(reason)

    async def _commit(
        self,
        updates: dict[str, Any],
        record: FailureRecord,
        stage: str | None,
        attempt: int,
    ) -> None:
        """Commit a supervisor-owned patch recording ``record`` (and maybe a move)."""
        session = self.session
        state = session.state
        candidate = state.model_copy(update=updates)
        applied, info = applied_info(session)  # a child's end the failed step took
        event = session.event(
            EventKind.FAILURE,
            stage,
            state.lifecycle,
            updates.get("lifecycle", state.lifecycle),
            Patch.of(updates),
            frozenset(updates),
            attempt,
            error=record,
            info=info or None,
        )
        session.applies = None
        if session.persistence is not None:
            mail = None if applied is None else Mail(applied, (), info)
            try:
                await session.persistence.record(event, candidate, mail=mail)
            except Exception as exc:  # the failure still ends or redirects the session here
                _logger.error("failure_not_stored", session_id=session.session_id, error=repr(exc))
        session.commit(candidate, event)
