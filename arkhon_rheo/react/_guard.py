"""Tool calls a human decides on: the act step that holds them, and the gate that shows them.

A `Toolbox` whose tools ask for approval (run policy ``approve``) or ask a
human about a call that may have happened (effect ``ask``) makes the engine
hold such a call instead of running it: the act step commits it as
``state.held`` and stays in ``ACTING``, where the ``"tool call"`` gate
(`held_gate`) pauses the session before the act stage runs again, its
question showing the call, its arguments, why it is held and its tool's
schema. A human approves it (as shown, or with edited arguments, validated
against the schema before anything is stored: the invariant `arguments_fit`)
or aborts the session. The act step then runs the turn's calls, the held one
as approved; the calls of the turn that had run already answer from the
session's effect ledger (side-effecting ones), or run again (read-only ones).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ToolCallHeld
from ..protocols import Condition, Gate, Patch
from ..tools import RunPolicy
from ._calls import unwrap
from ._state import HeldCall

if TYPE_CHECKING:
    from ..protocols import StateView, ToolCall, ToolMessage
    from ..tools import OnExhausted, Toolbox
    from ._state import ReactState

__all__ = ["GATE", "act_guarded", "arguments_fit", "held_gate"]

#: The name of the gate a held tool call pauses the agent at.
GATE = "tool call"

_WHY = {
    "approval": "its tool's run policy asks a human to approve each call before it runs",
    "ambiguous": (
        "it started and never finished (the process died, or it ran past its timeout), so "
        "its side effect may or may not have happened: check, then let it run again or abort"
    ),
}
_HOW = (
    "approve() runs it with the arguments shown; approve({...}) with edited arguments "
    "(checked against the schema); abort() fails the session"
)


def _plain(value: Any) -> Any:
    """A frozen JSON value (mappings and tuples) as plain JSON data."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def held_gate(toolbox: Toolbox) -> Gate:
    """The gate a held call pauses the agent at, asking about the call."""

    def question(state: ReactState) -> Any:
        held = state.held
        if held is None:
            return None
        name = held.call.name
        return {
            "tool": name,
            "call_id": held.call.id,
            "arguments": _plain(held.arguments),
            "reason": held.reason,
            "why": _WHY[held.reason],
            "attempts": held.attempts,
            "schema": _schema(toolbox, name),
            "answer": _HOW,
        }

    return Gate.when(
        _waits,
        name=GATE,
        field="approval",
        question=question,
        answer=dict[str, Any],
    )


def _schema(toolbox: Toolbox, name: str) -> Any:
    """The parameters' schema of tool ``name``: a Python tool's, or one the toolbox offers."""
    if name in toolbox:
        return toolbox[name].spec.parameters
    return next((_plain(spec.parameters) for spec in toolbox.specs if spec.name == name), None)


def _waits(state: ReactState) -> bool:
    return state.held is not None and state.approval is False


def arguments_fit(toolbox: Toolbox) -> Condition[ReactState]:
    """The invariant that refuses a human's edit of a held call that its tool would refuse.

    A Python tool's edit is checked against its parameters, a server's tool's
    (`MCPToolbox`) against its input schema: at the approval, before anything
    is stored, so the session stays paused at its gate.
    """

    def fits(state: ReactState) -> bool:
        held, approval = state.held, state.approval
        if held is None or not isinstance(approval, Mapping):
            return True
        name = held.call.name
        problems = toolbox.argument_problems(name, _plain(approval))
        if problems:  # raised: the violation names the tool and each field
            raise ValueError(
                f"the edited arguments of tool {name!r} do not fit its schema: {problems}"
            )
        return True

    return Condition("a held tool call's approved arguments fit its tool's schema", fits)


def _hold(
    calls: list[ToolCall], call: ToolCall, reason: str, ok: set[str], attempts: int = 0
) -> Patch:
    """The patch that holds ``call`` for a human, with the turn's calls as they stand."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = {}
    held = HeldCall(
        call=call,
        arguments=arguments if isinstance(arguments, dict) else {},
        reason=reason,  # type: ignore[arg-type]
        attempts=attempts,
    )
    return Patch(pending=tuple(calls), held=held, approval=False, approved=tuple(sorted(ok)))


async def act_guarded(
    view: StateView[ReactState],
    toolbox: Toolbox,
    parallel: int,
    on_exhausted: OnExhausted = "escalate",
) -> Patch:
    """The act step of an agent whose calls a human may have to decide on.

    Holds the first call of the turn that waits for an approval before running
    any; otherwise runs them all (at most ``parallel`` at once, a transient
    failure past its retries answered or escalated by ``on_exhausted``), and
    holds a call whose side effect may have happened if its tool asks a human.
    """
    calls = list(view.pending)
    ok = set(view.approved)
    rerun, attempts = "", 0
    held = view.held
    if held is not None:
        if view.approval is False:  # let through by another gate: it still waits
            return _hold(calls, held.call, held.reason, ok, held.attempts)
        arguments = held.arguments if view.approval is None else view.approval
        text = json.dumps(_plain(arguments), separators=(",", ":"))
        call = held.call.model_copy(update={"arguments": text})
        calls = [call if c.id == call.id else c for c in calls]
        if held.reason == "approval":
            ok.add(call.id)
        else:
            rerun, attempts = call.id, held.attempts
    for call in calls:
        if call.id not in ok and toolbox.policy(call.name) is RunPolicy.APPROVE:
            return _hold(calls, call, "approval", ok)
    results: list[ToolMessage | ToolCallHeld | None] = [None] * len(calls)
    limiter = anyio.CapacityLimiter(parallel)
    step = view.pending_step

    async def run(index: int, call: ToolCall) -> None:
        async with limiter:
            try:
                again = attempts if call.id == rerun else 0
                results[index] = await toolbox.call(
                    call,
                    step=step,
                    approved=call.id in ok,
                    rerun=again,
                    on_exhausted=on_exhausted,
                )
            except ToolCallHeld as waits:  # the others run on: their answers are kept
                results[index] = waits

    try:
        async with anyio.create_task_group() as group:
            for index, call in enumerate(calls):
                group.start_soon(run, index, call)
    except BaseExceptionGroup as errors:
        raise unwrap(errors) from None
    for call, result in zip(calls, results, strict=True):
        if isinstance(result, ToolCallHeld):
            return _hold(calls, call, result.reason, ok, result.attempts)
    done = [
        result for result in results if result is not None and not isinstance(result, Exception)
    ]
    patch = Patch(pending=(), tool_calls=view.tool_calls + len(calls), held=None, approval=False)
    return patch.set(approved=()).append("messages", *done)
