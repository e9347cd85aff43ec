"""`validate_stage`: a stage that runs a `RuleSet` over what the thinking stage proposed.

The rules' check as a `Stage`: rules pass → go on; a retryable violation → back
to the thinking state with the reason in ``metadata["retry_reason"]`` and
``metadata["retry_count"]`` incremented; a terminal violation → to an end
state with ``metadata["exit_reason"] == "terminal_violation"`` (and logged).

Why the results go in the patch and not through `record_call`: rules are
deterministic functions of the proposed step, so they belong to the stage's
computation, not to the outside world. Written into ``metadata["rules"]``,
every rule's result is in the step's event (its patch), stored with it; and a
re-executing replay (``replay(..., reexecute=True)``) runs the rules again and
reports a divergence if a rule now decides otherwise, where a recorded call
would be answered from the record and hide the change. (A rule that asks a
model should make that call through `record_call` itself.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..protocols import Patch, Stage, StateView

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable

    from ..protocols import AgentState
    from ._rule import RuleSet

__all__ = ["RETRY_COUNT", "RETRY_REASON", "TERMINAL_VIOLATION", "validate_stage"]

#: The metadata key holding the last retryable violation's reason.
RETRY_REASON = "retry_reason"
#: The metadata key counting retryable violations.
RETRY_COUNT = "retry_count"
#: ``metadata["exit_reason"]`` after a terminal violation.
TERMINAL_VIOLATION = "terminal_violation"


def validate_stage(
    rules: RuleSet[Any],
    *,
    subject: Callable[[StateView[Any]], Any],
    reads: Iterable[str] = (),
    passed: enum.Enum,
    retry: enum.Enum,
    terminal: enum.Enum,
    name: str = "validate",
) -> type[Stage[Any]]:
    """Build the stage that validates a proposed step with ``rules``.

    It writes only ``metadata``: ``metadata["rules"]`` holds each evaluated
    rule's result (``{"rule", "outcome", "reason"}``) in order; on a retryable
    violation ``retry_reason`` is the reason and ``retry_count`` grows by one;
    on a pass ``retry_reason`` is removed; on a terminal violation
    ``exit_reason`` is ``"terminal_violation"`` and ``violation`` names the rule
    and the reason.

    Args:
        rules: The rules, evaluated in order.
        subject: Picks the proposed step out of the stage's view (it must be
            JSON-friendly data or a pydantic model for the cache to key it).
        reads: The fields ``subject`` reads (``metadata`` is always read).
        passed: The next state when every rule passes.
        retry: The next state on a retryable violation (the thinking state).
        terminal: The next state on a terminal violation (an end state).
        name: The stage's name.

    Returns:
        The `Stage` class, for ``Machine(stages=...)``.
    """

    class Validate(Stage[Any], name=name, reads={*reads, "metadata"}, writes={"metadata"}):
        async def execute(self, view: StateView[Any]) -> Patch:
            evaluation = await rules.evaluate(subject(view))
            metadata: dict[str, Any] = dict(view.metadata)
            metadata["rules"] = [result.model_dump() for result in evaluation.results]
            violation = evaluation.violation
            if violation is None:
                metadata.pop(RETRY_REASON, None)
            elif violation.outcome == "retryable":
                metadata[RETRY_REASON] = violation.reason
                metadata[RETRY_COUNT] = int(metadata.get(RETRY_COUNT, 0)) + 1
            else:
                metadata["exit_reason"] = TERMINAL_VIOLATION
                metadata["violation"] = {"rule": violation.rule, "reason": violation.reason}
            return Patch(metadata=metadata)

        def next(self, state: AgentState) -> enum.Enum:
            results = state.metadata.get("rules") or ()
            outcome = results[-1]["outcome"] if results else "pass"
            if outcome == "terminal":
                return terminal
            return retry if outcome == "retryable" else passed

    Validate.__qualname__ = Validate.__name__ = f"validate_stage({name!r})"
    return Validate
