"""What stages raise to classify their failures, and what the supervisor refuses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

from ._base import ArkhonError

__all__ = [
    "ContractViolation",
    "Fatal",
    "IllegalTransition",
    "InvalidPatch",
    "InvariantViolation",
    "PreconditionFailed",
    "ReadOnlyState",
    "Recoverable",
    "RestartIntensityExceeded",
    "StageFailure",
    "StageTimeout",
    "SubgraphFailed",
    "ToolTimeout",
    "Transient",
    "TransitionInvariantViolation",
    "UndeclaredRead",
    "UndeclaredWrite",
]


class StageFailure(ArkhonError):
    """Raised by a stage (or a tool, or a model client) to say how to treat its failure.

    Raise one of the three subclasses directly, or wrap a third-party error:
    ``raise Transient("rate limited") from exc``. The supervisor fills in the
    context attributes when it records the failure.

    Attributes:
        stage: The stage that failed, once known.
    """

    def __init__(self, message: str = "", *, stage: str | None = None) -> None:
        super().__init__(message or type(self).__name__)
        self.stage = stage


class Transient(StageFailure):
    """A failure worth retrying as it is (a timeout, a rate limit, a dropped link).

    Attributes:
        stage: The stage that failed, once known.
        retry_after: The least time, in seconds, to wait before retrying, when
            the failing party said (a rate limit's ``Retry-After``); the
            supervisor's backoff waits at least this long. ``None`` when unknown.
    """

    retry_after: float | None = None  # also for instances rebuilt from a recorded call

    def __init__(
        self, message: str = "", *, stage: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, stage=stage)
        if retry_after is not None:
            self.retry_after = max(0.0, float(retry_after))


class ToolTimeout(Transient, TimeoutError):
    """A tool ran past its timeout: cancelled in-process, or its sandbox process killed.

    It is `Transient`, so the supervisor retries the stage that made the call
    under its backoff policy.

    Attributes:
        tool: The tool's name.
        timeout: The timeout that expired, in seconds.
    """

    def __init__(self, *, tool: str, timeout: float, detail: str = "") -> None:
        suffix = f"; {detail}" if detail else ""
        super().__init__(
            f"tool {tool!r} did not finish within {timeout:g} s and was stopped; raise its "
            f"timeout with @tool(timeout=...), or make it faster{suffix}"
        )
        self.tool = tool
        self.timeout = timeout


class Recoverable(StageFailure):
    """A failure the session survives: restart the stage, record the error, go on."""


class Fatal(StageFailure):
    """A failure that ends the session in its failed state."""


class SubgraphFailed(Recoverable):
    """A subgraph stage's child session ended without finishing.

    Recoverable, like any stage failure the session survives: the stage restarts
    and a later attempt runs a new child (register a rule for it on the
    `Classifier` to treat it otherwise).

    Attributes:
        session_id: The child session.
        exit_reason: How the child ended (``"failed"``, ``"max_steps"``...).
        failure: The child's failure record (a `FailureRecord`), if it has one.
    """

    def __init__(
        self, *, stage: str, session_id: str, exit_reason: str, failure: Any = None
    ) -> None:
        detail = (
            f": {failure.error_type}: {failure.message}"
            if failure is not None and hasattr(failure, "error_type")
            else ""
        )
        super().__init__(
            f"subgraph stage {stage!r}: child session {session_id!r} ended {exit_reason}"
            f"{detail}; see its history for what happened",
            stage=stage,
        )
        self.session_id = session_id
        self.exit_reason = exit_reason
        self.failure = failure


class ContractViolation(ArkhonError):
    """The supervisor refused what a stage did or proposed; nothing was committed.

    Attributes:
        stage: The stage at fault.
    """

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "nothing"


class UndeclaredRead(ContractViolation):
    """A stage read a field outside its declared read set.

    It is deliberately not an ``AttributeError``: ``getattr(view, name, default)``
    or ``hasattr`` must not quietly hide an undeclared read.

    Attributes:
        stage: The stage.
        field: The field it tried to read.
    """

    def __init__(self, *, stage: str, field: str, reads: Iterable[str]) -> None:
        super().__init__(
            f"stage {stage!r} read {field!r}, which is not in its read set "
            f"({_listing(reads)}); add it to the stage's reads",
            stage=stage,
        )
        self.field = field


class ReadOnlyState(ContractViolation, AttributeError):
    """A stage tried to assign or delete a field through its read-only view.

    Attributes:
        stage: The stage.
        field: The field it tried to change.
    """

    def __init__(self, *, stage: str, field: str) -> None:
        super().__init__(
            f"stage {stage!r} tried to change {field!r} through its view; the state is "
            "read-only: return a Patch that writes the field instead",
            stage=stage,
        )
        self.field = field


class UndeclaredWrite(ContractViolation):
    """A patch writes fields outside the stage's write set; it was not merged at all.

    Attributes:
        stage: The stage.
        fields: The undeclared fields the patch wrote.
    """

    def __init__(
        self,
        *,
        stage: str,
        fields: Iterable[str],
        writes: Iterable[str],
        advice: str = "Declare the field in the stage's writes, or leave it to the stage that "
        "owns it",
    ) -> None:
        self.fields = tuple(sorted(fields))
        super().__init__(
            f"stage {stage!r} wrote {_listing(self.fields)}, outside its write set "
            f"({_listing(writes)}); the patch was rejected whole. {advice}",
            stage=stage,
        )


class InvalidPatch(ContractViolation):
    """A value in a patch fails its field's validation, or the patch is malformed.

    Attributes:
        stage: The stage.
        field: The field whose value was refused.
    """

    def __init__(self, *, stage: str, field: str, reason: str) -> None:
        super().__init__(
            f"stage {stage!r} proposed an invalid value for {field!r}: {reason}", stage=stage
        )
        self.field = field


class PreconditionFailed(ContractViolation):
    """The committed state does not meet a precondition of the stage about to run.

    Attributes:
        stage: The stage.
        condition: The name of the condition that failed.
    """

    def __init__(self, *, stage: str, condition: str) -> None:
        super().__init__(f"precondition of stage {stage!r} not met: {condition}", stage=stage)
        self.condition = condition


class InvariantViolation(ContractViolation):
    """A candidate state breaks an invariant of its lifecycle state; it was not committed.

    Attributes:
        stage: The stage whose patch produced the candidate.
        invariant: The name of the invariant.
        lifecycle: The lifecycle state whose invariant it is.
    """

    def __init__(self, *, stage: str, invariant: str, lifecycle: str) -> None:
        super().__init__(
            f"invariant of {lifecycle!r} violated after stage {stage!r}: {invariant}",
            stage=stage,
        )
        self.invariant = invariant
        self.lifecycle = lifecycle


class TransitionInvariantViolation(InvariantViolation):
    """A step would take an edge whose transition invariant does not hold; it was not committed.

    Attributes:
        stage: The stage whose patch produced the candidate.
        invariant: The name of the transition invariant.
        lifecycle: The state the step would enter.
        from_state: The state the step started from.
        to_state: The state the step would enter (same as ``lifecycle``).
    """

    def __init__(self, *, stage: str, invariant: str, from_state: str, to_state: str) -> None:
        ContractViolation.__init__(
            self,
            f"invariant of the transition {from_state!r} -> {to_state!r} violated by stage "
            f"{stage!r}: {invariant}; the step was not committed (fix the stage's patch or "
            "its next())",
            stage=stage,
        )
        self.invariant = invariant
        self.lifecycle = to_state
        self.from_state = from_state
        self.to_state = to_state


class IllegalTransition(ContractViolation):
    """A stage chose a next state the machine does not allow from the current one.

    Attributes:
        stage: The stage whose ``next`` chose it.
        from_state: The current lifecycle state.
        to_state: The state chosen.
    """

    def __init__(
        self, *, stage: str, from_state: str, to_state: str, allowed: Iterable[str]
    ) -> None:
        super().__init__(
            f"stage {stage!r} chose {from_state!r} -> {to_state!r}, which the machine does "
            f"not allow (allowed: {_listing(allowed)})",
            stage=stage,
        )
        self.from_state = from_state
        self.to_state = to_state


class StageTimeout(ArkhonError, TimeoutError):
    """A stage overran the deadline of its lifecycle state and was cancelled.

    Attributes:
        stage: The stage.
        deadline: The deadline, in seconds.
    """

    def __init__(self, *, stage: str, deadline: float) -> None:
        super().__init__(f"stage {stage!r} overran its {deadline:g} s deadline and was cancelled")
        self.stage = stage
        self.deadline = deadline


class RestartIntensityExceeded(ArkhonError):
    """More restarts happened within the window than the policy allows.

    The session's failure record keeps the error that tipped the balance (its
    type and message), its message followed by `NOTE` and this error's
    message; its class is fatal.

    Attributes:
        stage: The stage whose failure tipped the balance.
        restarts: The limit.
        window: The window, in seconds.
    """

    #: What a failure record's message says after its error's own when the
    #: restart intensity ran out (``"... [the restart intensity ran out: ...]"``).
    NOTE = "the restart intensity ran out"

    def __init__(self, *, stage: str, restarts: int, window: float) -> None:
        super().__init__(
            f"more than {restarts} restarts within {window:g} s (last: stage {stage!r}); "
            "escalating to fatal. Fix the failing stage or relax the restart intensity"
        )
        self.stage = stage
        self.restarts = restarts
        self.window = window
