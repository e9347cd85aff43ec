"""The checked turn: what the model proposed is checked before it is committed.

An agent built with ``react_agent(rules=..., stuck=..., budget=GlobalBudget(...))``
thinks with `CheckedThinkStage`: the model turn of `ThinkStage`, then, in the
same step, before the proposal is committed:

1. runs the rules over the `Proposal`: a retryable
   violation goes back to the model as the observation of each call (or, for
   an answer, as a message), at most ``max_rule_retries`` times in a row; a
   terminal one, or one past the retries, ends the agent
   (`StopReason.VIOLATION`);
2. moves the phase (stuck detection): the phase the chosen action leads to
   (`infer_state_from_tool`) must be one `PHASE_TRANSITIONS` allows. A
   forbidden move is not made: by the `StuckPolicy`, the model is told which
   moves it may make (soft), the agent goes to its STUCK_* phase where it may
   only answer (hard), or it finishes at once with its best answer so far
   (auto-finish). A stuck agent (`StuckDetector.why`) is told the way out in
   its ``agent_state`` line (soft), lets this step's calls run and moves to its
   STUCK_* phase (hard), or finishes at once (auto-finish);
3. spends the global round budget: a decision round, the calls and a round
   of each strategy; a non-exploit call in an overdraft round is blocked, and
   the next turn is the wrap-up turn.

Everything it decides is in the step's patch, and the time it reads goes
through ``record_call("clock", ...)``, so a re-executing replay checks it all
again. A proposal sent back makes the step go from ``THINKING`` to
``THINKING``: the model is asked again, with what was wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._log import get_logger
from ..protocols import (
    AssistantMessage,
    Lifecycle,
    Message,
    Patch,
    ToolMessage,
    UserMessage,
    record_call,
)
from ._options import CONTROLS, Proposal, spent_round
from ._stages import ThinkStage, _now
from ._state import ReactState, StopReason
from ._stuck import (
    PHASE_TRANSITIONS,
    Phase,
    PhaseTrack,
    StuckPolicy,
    infer_state_from_tool,
    offered_actions,
)

if TYPE_CHECKING:
    import enum
    from collections.abc import Sequence

    from ..protocols import StateView, ToolCall
    from ..rules import RuleResult
    from ._options import CheckOptions
    from ._rounds import DecisionBudget
    from ._stuck import StuckDetector

__all__ = ["CheckedThinkStage"]

P = Phase
_log = get_logger("arkhon_rheo.react")


@dataclass(slots=True)
class _Outcome:
    """What the checks made of a proposal: commit it, send it back, or finish."""

    kind: Literal["commit", "reject", "finish"] = "commit"
    why: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None
    exit: StopReason | None = None

    def reject(self, why: str) -> _Outcome:
        self.kind, self.why = "reject", why
        return self

    def finish(self, answer: str | None, exit: StopReason, why: str) -> _Outcome:
        self.kind, self.answer, self.exit, self.why = "finish", answer, exit, why
        return self


@dataclass(frozen=True, slots=True)
class _Turn:
    """The state as the turn leaves it, before its proposal is committed: what the checks read."""

    before: Sequence[Message]
    messages: Sequence[Message]
    calls: tuple[ToolCall, ...]
    answer: str | None
    turns: int
    track: PhaseTrack
    rule_retries: int
    decisions: DecisionBudget | None


class CheckedThinkStage(
    ThinkStage,
    name="think",
    reads=ThinkStage.reads | {"track", "agent_state", "rule_retries", "decisions"},
    writes=ThinkStage.writes
    | {"track", "stuck_reason", "agent_state", "checks", "rule_retries", "violation", "decisions"},
):
    """A model turn whose proposal is checked (rules, phase, global budget) before it is committed.

    It is the think stage of an agent with ``stuck=``, ``rules=`` or a global
    budget: the turn as `ThinkStage` takes it, then the checks, in one step.
    """

    async def execute(self, view: StateView[ReactState]) -> Patch:
        """The turn, and its proposal committed, sent back with why, or the agent finished."""
        patch = await super().execute(view)
        values = patch.values
        if values.get("exit") in (StopReason.STOPPED, StopReason.MAX_STEPS):
            return patch
        options = self.config.checks
        assert options is not None
        turn = _Turn(
            before=view.messages,
            messages=(*view.messages, *patch.appends.get("messages", ())),
            calls=tuple(values.get("pending", ())),
            answer=values.get("answer") if values.get("exit") is not None else None,
            turns=int(values.get("turns", view.turns)),
            track=view.track,
            rule_retries=view.rule_retries,
            decisions=view.decisions,
        )
        outcome = _Outcome()
        if options.rules is not None:
            await _rules(options, turn, outcome)
        if options.detector is not None and outcome.kind == "commit":
            request = {"turn": turn.turns, "check": True}
            now = await record_call("clock", request, _now, returns=float)
            _phases(options.detector, turn, now, outcome)
        if options.rounds is not None:
            _budget(options, turn, outcome)
        checked = _patch(turn.calls, outcome)
        return patch.set(**checked.values).append("messages", *checked.appends.get("messages", ()))

    def next(self, state: ReactState) -> enum.Enum:
        """Finish (or, conversational, wait) on an answer; act on calls; else think again."""
        if state.exit is not None:
            return Lifecycle.OBSERVING if self.config.conversational else Lifecycle.FINISHED
        return Lifecycle.ACTING if state.pending else Lifecycle.THINKING


async def _rules(options: CheckOptions, turn: _Turn, outcome: _Outcome) -> None:
    """The rules' check: the proposal through the rules."""
    assert options.rules is not None
    proposal = Proposal(
        thought=_thought(turn.messages),
        tool_calls=turn.calls,
        answer=turn.answer,
        phase=turn.track.phase.value if options.detector is not None else None,
        retries=turn.rule_retries,
    )
    evaluation = await options.rules.evaluate(proposal)
    outcome.fields["checks"] = evaluation.results
    violation = evaluation.violation
    if violation is None:
        outcome.fields["rule_retries"] = 0
        return
    retries = turn.rule_retries + 1
    if violation.outcome == "retryable" and retries <= options.max_rule_retries:
        outcome.fields["rule_retries"] = retries
        outcome.reject(f"rejected by rule {violation.rule}: {violation.reason}. Revise your step.")
        return
    _log.warning("react_rule_violation", rule=violation.rule, reason=violation.reason)
    outcome.fields.update(rule_retries=retries, violation=violation)
    outcome.finish(None, StopReason.VIOLATION, _ended(violation))


def _ended(violation: RuleResult) -> str:
    return f"not run: rule {violation.rule} ended the agent ({violation.reason})"


def _phases(detector: StuckDetector, turn: _Turn, now: float, outcome: _Outcome) -> None:
    """Phases: the move the proposal makes, and stuck detection after it."""
    track = turn.track.start(now)
    if track.phase in (P.FINISHING, P.DONE):  # a conversational agent's next message
        track = track.enter(P.INIT, now)
    phase = track.phase
    first = turn.calls[0].name if turn.calls else None
    target = infer_state_from_tool(first, routes=detector.routes)
    ran = None if first in CONTROLS else first  # control actions are no tool call
    failed = _last_failed(turn.before)
    if target not in PHASE_TRANSITIONS.get(phase, frozenset()):
        _forbidden(detector, turn, track.step(ran, error=failed), phase, target, now, outcome)
        return
    track = track.enter(target, now).step(ran, error=failed)
    reason = detector.why(track, now) if target is not P.FINISHING else None
    if reason is not None:
        outcome.fields["stuck_reason"] = reason
        _log.warning("agent_stuck", phase=phase.value, reason=reason.value)
        forced = detector.forced_state(track.phase)
        if forced is P.FINISHING:
            outcome.finish(_best(turn.messages), StopReason.STUCK, "not run: the agent was stuck")
        elif forced is not None:
            track = track.enter(forced, now)
    _track(detector, turn, track, now, outcome)


def _forbidden(
    detector: StuckDetector,
    turn: _Turn,
    track: PhaseTrack,
    phase: Phase,
    target: Phase,
    now: float,
    outcome: _Outcome,
) -> None:
    """A move `PHASE_TRANSITIONS` forbids: suggest the allowed ones, or force the way out."""
    moves = _moves(detector, phase)
    why = f"this moves the agent from {phase.value} to {target.value}, which is not allowed"
    _log.info("react_forbidden_phase", phase=phase.value, target=target.value)
    forced = detector.forced_state(phase)
    if detector.policy is StuckPolicy.SOFT or (phase is P.INIT and forced is P.FINISHING):
        forced = None  # soft, or a first move (hard has no STUCK_* phase for INIT): suggest
    if forced is None:
        outcome.reject(f"not run: {why}. From {phase.value} you may: {moves}.")
    elif forced is P.FINISHING:
        outcome.finish(_best(turn.messages), StopReason.STUCK, f"not run: {why}; finishing")
    else:
        track = track.enter(forced, now)
        outcome.reject(
            f"not run: {why}; now {forced.value}: answer now, in text, with what you have"
        )
    _track(detector, turn, track, now, outcome)


def _moves(detector: StuckDetector, phase: Phase) -> str:
    """The allowed moves from ``phase``, with the actions that make them, for the model."""
    names = [*detector.routes, *CONTROLS, "context_fts_search"]
    offered = offered_actions(phase, dict.fromkeys(names), routes=detector.routes)
    moves = []
    for target in sorted(PHASE_TRANSITIONS.get(phase, ()), key=lambda p: p.value):
        actions = [n for n in offered if infer_state_from_tool(n, routes=detector.routes) is target]
        if target is P.FINISHING:
            actions.append("answer in text")
        elif target is P.DECIDING:
            actions.append("another tool")
        if actions and not target.name.startswith("STUCK"):
            moves.append(f"{target.value} ({', '.join(actions)})")
    return "; ".join(moves)


def _track(
    detector: StuckDetector,
    turn: _Turn,
    track: PhaseTrack,
    now: float,
    outcome: _Outcome,
) -> None:
    block = detector.agent_state(track, now)
    block["next_actions"] = _moves(detector, track.phase)
    outcome.fields["track"] = track
    outcome.fields["agent_state"] = "agent_state: " + json.dumps(block, sort_keys=True)


def _budget(options: CheckOptions, turn: _Turn, outcome: _Outcome) -> None:
    """Round budgets: the decision round, and the calls it commits, against the global budget."""
    rounds = options.rounds
    assert rounds is not None
    spent = turn.decisions or rounds.start
    if outcome.kind != "commit":
        outcome.fields["decisions"] = spent_round(spent)
        return
    names = [call.name for call in turn.calls if call.name not in CONTROLS]
    spent, blocked = rounds.spend(spent, names)
    outcome.fields["decisions"] = spent
    if blocked:
        outcome.fields["wrapup"] = True
        outcome.reject(
            "not run: exploit_overdraft_blocked (the budget is spent; only exploit tools may "
            "run in the overdraft). Give your final answer now, in text."
        )


def _patch(calls: Sequence[ToolCall], outcome: _Outcome) -> Patch:
    """What the checks add to the turn's patch: the messages to the model, the committed step."""
    patch = Patch(**outcome.fields)
    if outcome.kind == "finish":
        notes = [_observation(call, outcome.why) for call in calls]
        return patch.set(pending=(), answer=outcome.answer, output=None, exit=outcome.exit).append(
            "messages", *notes
        )
    if outcome.kind == "reject":
        patch = patch.set(pending=(), answer=None, output=None, exit=None)
        if calls:
            return patch.append("messages", *(_observation(call, outcome.why) for call in calls))
        return patch.append("messages", UserMessage(content=f"Your answer was {outcome.why}"))
    controls = [call for call in calls if call.name in CONTROLS]
    if not controls:
        return patch
    noted = [ToolMessage(tool_call_id=c.id, name=c.name, content="noted") for c in controls]
    rest = tuple(call for call in calls if call.name not in CONTROLS)
    return patch.set(pending=rest).append("messages", *noted)


def _observation(call: ToolCall, why: str) -> Message:
    return ToolMessage(tool_call_id=call.id, name=call.name, content=why, is_error=True)


def _thought(messages: Sequence[Message]) -> str:
    last = messages[-1] if len(messages) else None
    return last.content or "" if isinstance(last, AssistantMessage) else ""


def _last_failed(messages: Sequence[Message]) -> bool:
    """Whether a call of the turn before this one failed (its result, last in ``messages``)."""
    failed = False
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        failed = failed or message.is_error
    return failed


def _best(messages: Sequence[Message]) -> str:
    """Stuck detection's auto-finish answer: the best so far (the latest text or result)."""
    for message in reversed(messages):
        failed = isinstance(message, ToolMessage) and message.is_error
        text = message.content if isinstance(message, AssistantMessage | ToolMessage) else None
        if text and text.strip() and not failed:
            return f"Reached stuck state. Summary: {text}"
    return "Reached stuck state. Summary: nothing found"
