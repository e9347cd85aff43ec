"""Phases of an agent and stuck detection: what phase it is in, and when it is going nowhere.

An agent moves through the phases of `Phase` (INIT → SEARCHING → ANALYZING →
DECIDING → FINISHING, with a STUCK_* phase beside each working one). The phase
follows from the action the model chose (`infer_state_from_tool`); only the
moves of `PHASE_TRANSITIONS` are allowed. A `StuckDetector` says when the agent
is stuck, from a `PhaseTrack` (the counters an agent keeps in its state) and
the time now:

- the same tool called `StuckDetector.repeat_limit` times in a row (3),
- `StuckDetector.step_limit` steps in a row in one phase (5),
- the phase's timeout passed (`PHASE_TIMEOUTS`: 60/30/45/10/5 s),
- `StuckDetector.failed_decisions` failed tool calls in a row while deciding (3).

It then suggests a way out (`exit_suggestion`) and, by its `StuckPolicy`,
warns (soft), forces the STUCK_* phase (hard) or finishes at once
(auto-finish). Everything here is a pure function of the track and ``now``: a
caller reads the time through ``record_call("clock", ...)`` so that a replay
sees the same time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from .._errors import ConfigurationError
from ..protocols import FrozenMap

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "PHASE_ACTIONS",
    "PHASE_TIMEOUTS",
    "PHASE_TRANSITIONS",
    "Phase",
    "PhaseStep",
    "PhaseTrack",
    "StuckDetector",
    "StuckPolicy",
    "StuckReason",
    "action_allowed",
    "exit_suggestion",
    "infer_state_from_tool",
    "offered_actions",
]


class Phase(enum.Enum):
    """The phase an agent is in (a lifecycle enum: use it as a machine's states)."""

    #: Started; no action taken yet.
    INIT = "init"
    #: Gathering information with the search tools.
    SEARCHING = "searching"
    #: The model works through what it found; no tool runs.
    ANALYZING = "analyzing"
    #: Any tool, or finishing.
    DECIDING = "deciding"
    #: Searching went nowhere: finish with a summary.
    STUCK_SEARCH = "stuck_search"
    #: Analysing went nowhere: finish with a summary.
    STUCK_ANALYZE = "stuck_analyze"
    #: Deciding went nowhere: finish with a summary.
    STUCK_DECIDE = "stuck_decide"
    #: Completing and returning the result.
    FINISHING = "finishing"
    #: The end (terminal): the result is returned.
    DONE = "done"
    #: A fatal error ended the agent (terminal).
    FAILED = "failed"


P = Phase
_STUCK = {P.SEARCHING: P.STUCK_SEARCH, P.ANALYZING: P.STUCK_ANALYZE, P.DECIDING: P.STUCK_DECIDE}

#: The allowed moves. Staying in SEARCHING, ANALYZING or DECIDING for another
#: step is allowed (it is how "3 identical calls" and "5 steps in one phase"
#: can happen); SEARCHING → DECIDING, ANALYZING → SEARCHING and any move back
#: to INIT are not.
PHASE_TRANSITIONS: Mapping[Phase, frozenset[Phase]] = FrozenMap(
    {
        P.INIT: frozenset({P.SEARCHING, P.DECIDING, P.FINISHING}),
        P.SEARCHING: frozenset({P.SEARCHING, P.ANALYZING, P.STUCK_SEARCH, P.FINISHING}),
        P.ANALYZING: frozenset({P.ANALYZING, P.DECIDING, P.STUCK_ANALYZE, P.FINISHING}),
        P.DECIDING: frozenset({P.DECIDING, P.SEARCHING, P.FINISHING, P.STUCK_DECIDE}),
        P.STUCK_SEARCH: frozenset({P.FINISHING}),
        P.STUCK_ANALYZE: frozenset({P.FINISHING}),
        P.STUCK_DECIDE: frozenset({P.FINISHING}),
        P.FINISHING: frozenset({P.DONE}),
    }
)

#: Seconds a phase may last before the agent counts as stuck (INIT has no timeout).
PHASE_TIMEOUTS: Mapping[Phase, float] = FrozenMap(
    {
        P.SEARCHING: 60.0,
        P.ANALYZING: 30.0,
        P.DECIDING: 45.0,
        P.STUCK_SEARCH: 10.0,
        P.STUCK_ANALYZE: 10.0,
        P.STUCK_DECIDE: 10.0,
        P.FINISHING: 5.0,
    }
)

_SEARCH_TOOLS = frozenset({"context_fts_search", "context_memory_search"})

#: The tools a step may run in each phase; None: any tool. The control actions
#: ``analyze``, ``decide`` and ``finish`` run no tool: they only move the phase.
PHASE_ACTIONS: Mapping[Phase, frozenset[str] | None] = FrozenMap(
    {
        P.INIT: frozenset(),
        P.SEARCHING: _SEARCH_TOOLS,
        P.ANALYZING: frozenset(),
        P.DECIDING: None,
        P.STUCK_SEARCH: frozenset(),
        P.STUCK_ANALYZE: frozenset(),
        P.STUCK_DECIDE: frozenset(),
        P.FINISHING: frozenset(),
    }
)

_ROUTES: Mapping[str, Phase] = FrozenMap(
    {
        "context_fts_search": P.SEARCHING,
        "context_memory_search": P.SEARCHING,
        "analyze": P.ANALYZING,
        "finish": P.FINISHING,
    }
)

_SUGGESTIONS: Mapping[Phase, str] = FrozenMap(
    {
        P.SEARCHING: "You've searched 3 times for similar information. "
        "Try: finish with the results you found.",
        P.ANALYZING: "Analysis is taking too long. You have enough information. "
        "Try: finish with your summary.",
        P.DECIDING: "Decision loop detected. Commit to an action or finish.",
    }
)
_OTHERWISE = "No progress made. Use 'finish' with the best answer you have."


def _canonical(tool_name: str) -> str:
    # Model APIs refuse dots in tool names: ``context.fts_search`` is offered as
    # ``context_fts_search``; both spellings mean the same tool.
    return tool_name.replace(".", "_")


def infer_state_from_tool(
    tool_name: str | None, *, routes: Mapping[str, Phase] | None = None
) -> Phase:
    """The phase a chosen action leads to.

    ``context_fts_search`` and ``context_memory_search`` (or their dotted
    names) lead to SEARCHING, ``analyze`` to ANALYZING, no tool (a plain
    answer) and ``finish`` to FINISHING, any other tool to DECIDING.

    Args:
        tool_name: The tool the model chose; None when it answered in text.
        routes: More tools and the phase each leads to; they win over the defaults.
    """
    if tool_name is None:
        return P.FINISHING
    name = _canonical(tool_name)
    if routes and (found := routes.get(name, routes.get(tool_name))) is not None:
        return found
    return _ROUTES.get(name, P.DECIDING)


def action_allowed(phase: Phase, tool_name: str) -> bool:
    """Whether a step in ``phase`` may run the tool ``tool_name`` (`PHASE_ACTIONS`)."""
    allowed = PHASE_ACTIONS.get(phase, frozenset())
    return allowed is None or _canonical(tool_name) in allowed


def offered_actions(
    phase: Phase, names: Iterable[str], *, routes: Mapping[str, Phase] | None = None
) -> tuple[str, ...]:
    """The actions of ``names`` the model may choose in ``phase``: those leading to a next phase."""
    allowed = PHASE_TRANSITIONS.get(phase, frozenset())
    return tuple(n for n in names if infer_state_from_tool(n, routes=routes) in allowed)


def exit_suggestion(phase: Phase) -> str:
    """The way out the agent is told when it is stuck in ``phase`` (one text per phase)."""
    return _SUGGESTIONS.get(phase, _OTHERWISE)


class StuckPolicy(enum.Enum):
    """What an agent does when it is stuck."""

    #: Log a warning and tell the model (``stuck`` and ``suggested_exit`` in its payload).
    SOFT = "soft"
    #: Force the STUCK_* phase, in which the model may only finish with a summary.
    HARD = "hard"
    #: Finish at once with the best answer so far.
    AUTO_FINISH = "auto_finish"


class StuckReason(enum.Enum):
    """Why an agent counts as stuck."""

    #: The same tool was called too many times in a row.
    REPEATED_TOOL = "repeated_tool"
    #: Too many steps in a row in one phase.
    TOO_MANY_STEPS = "too_many_steps"
    #: The phase's timeout passed.
    TIMEOUT = "timeout"
    #: Too many failed tool calls in a row while deciding.
    FAILED_DECISIONS = "failed_decisions"


class PhaseStep(BaseModel):
    """One step of an agent, as its phase history keeps it.

    Attributes:
        step_num: 1 for the first step.
        state: The phase the step ran in.
        tool_name: The tool it ran, or the control action (``analyze``, ``decide``,
            ``finish``); None for none.
        tool_args: The arguments, as the model sent them (JSON text).
        result: What the tool answered (or the action's text).
        error: Whether the tool call failed.
        duration_ms: From the step's start to its end.
        timestamp: When it started (seconds, by the agent's recorded clock).
    """

    model_config = ConfigDict(frozen=True)

    step_num: int = Field(ge=1)
    state: Phase
    tool_name: str | None = None
    tool_args: str = ""
    result: str = ""
    error: bool = False
    duration_ms: int = Field(default=0, ge=0)
    timestamp: float = 0.0


class PhaseTrack(BaseModel):
    """The counters stuck detection reads: keep one in your agent's state.

    Each method returns a new track (it is frozen), so it can be a field of an
    `AgentState` and change only through patches.

    Attributes:
        phase: The phase the counters are about.
        entered_at: When it was entered (None before the first step).
        steps: Steps taken, in all.
        steps_in_state: Steps in a row in ``phase``.
        last_tool: The last tool called (control actions do not count).
        tool_streak: How many times in a row ``last_tool`` was called.
        failed_decisions: Failed tool calls in a row in DECIDING.
        transitions: How many times each move was made (``"searching->analyzing"``).
        seconds_in: Seconds spent in each phase left so far (by value).
    """

    model_config = ConfigDict(frozen=True)

    phase: Phase = P.INIT
    entered_at: float | None = None
    steps: int = Field(default=0, ge=0)
    steps_in_state: int = Field(default=0, ge=0)
    last_tool: str | None = None
    tool_streak: int = Field(default=0, ge=0)
    failed_decisions: int = Field(default=0, ge=0)
    transitions: FrozenMap[str, int] = FrozenMap()
    seconds_in: FrozenMap[str, float] = FrozenMap()

    def duration(self, now: float) -> float:
        """Seconds spent in the current phase at ``now`` (0 before the first step)."""
        return 0.0 if self.entered_at is None else max(0.0, now - self.entered_at)

    def start(self, now: float) -> PhaseTrack:
        """The track with its clock started at ``now``, if it was not yet."""
        return self if self.entered_at is not None else self.model_copy(update={"entered_at": now})

    def step(self, tool_name: str | None = None, *, error: bool = False) -> PhaseTrack:
        """The track after one step in the current phase that ran ``tool_name`` (None: no tool)."""
        streak, last = self.tool_streak, self.last_tool
        if tool_name is not None:
            name = _canonical(tool_name)
            streak, last = (streak + 1 if name == last else 1), name
        failed = self.failed_decisions
        if self.phase is P.DECIDING and tool_name is not None:
            failed = failed + 1 if error else 0
        return self.model_copy(
            update={
                "steps": self.steps + 1,
                "steps_in_state": self.steps_in_state + 1,
                "last_tool": last,
                "tool_streak": streak,
                "failed_decisions": failed,
            }
        )

    def enter(self, phase: Phase, now: float) -> PhaseTrack:
        """The track after moving to ``phase`` at ``now`` (staying in the phase changes nothing)."""
        if phase is self.phase:
            return self
        key = f"{self.phase.value}->{phase.value}"
        transitions = dict(self.transitions)
        transitions[key] = transitions.get(key, 0) + 1
        seconds = dict(self.seconds_in)
        seconds[self.phase.value] = seconds.get(self.phase.value, 0.0) + self.duration(now)
        return self.model_copy(
            update={
                "phase": phase,
                "entered_at": now,
                "steps_in_state": 0,
                "failed_decisions": 0,
                "transitions": FrozenMap(transitions),
                "seconds_in": FrozenMap(seconds),
            }
        )

    def time_per_state(self, now: float) -> dict[str, float]:
        """Seconds spent in each phase, the current one up to ``now`` included (diagnostics)."""
        seconds = dict(self.seconds_in)
        seconds[self.phase.value] = seconds.get(self.phase.value, 0.0) + self.duration(now)
        return seconds


@dataclass(frozen=True, slots=True)
class StuckDetector:
    """Says whether an agent is stuck, why, and what to do about it.

    Attributes:
        policy: What to do when stuck (see `StuckPolicy`).
        repeat_limit: The same tool this many times in a row is stuck.
        step_limit: This many steps in a row in one phase is stuck.
        failed_decisions: This many failed tool calls in a row while deciding is stuck.
        timeouts: Seconds each phase may last (`PHASE_TIMEOUTS` by default).
        routes: More tools and the phase each leads to (`infer_state_from_tool`'s
            ``routes``), for ``react_agent(stuck=...)``: other tools lead to DECIDING.
    """

    policy: StuckPolicy = StuckPolicy.HARD
    repeat_limit: int = 3
    step_limit: int = 5
    failed_decisions: int = 3
    timeouts: Mapping[Phase, float] = field(default_factory=lambda: PHASE_TIMEOUTS)
    routes: Mapping[str, Phase] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        if any(not isinstance(phase, Phase) for phase in self.routes.values()):
            raise ConfigurationError(
                f"StuckDetector(routes={dict(self.routes)!r}): map tool names to a Phase"
            )
        if not isinstance(self.policy, StuckPolicy):
            raise ConfigurationError(
                f"StuckDetector(policy={self.policy!r}): use a StuckPolicy "
                f"({', '.join(p.name for p in StuckPolicy)})"
            )
        for name in ("repeat_limit", "step_limit", "failed_decisions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"StuckDetector({name}={value!r}): must be an int of at least 1"
                )
        for phase, seconds in self.timeouts.items():
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise ConfigurationError(
                    f"StuckDetector: the timeout of {phase!r} must be a positive number of "
                    f"seconds, got {seconds!r}"
                )

    def why(self, track: PhaseTrack, now: float) -> StuckReason | None:
        """Why the agent is stuck at ``now``, or None if it is not."""
        working = track.phase in _STUCK
        if working and track.tool_streak >= self.repeat_limit:
            return StuckReason.REPEATED_TOOL
        if working and track.steps_in_state >= self.step_limit:
            return StuckReason.TOO_MANY_STEPS
        if track.phase is P.DECIDING and track.failed_decisions >= self.failed_decisions:
            return StuckReason.FAILED_DECISIONS
        timeout = self.timeouts.get(track.phase)
        if timeout is not None and track.duration(now) > timeout:
            return StuckReason.TIMEOUT
        return None

    def stuck(self, track: PhaseTrack, now: float) -> bool:
        """Whether the agent is stuck at ``now``."""
        return self.why(track, now) is not None

    def suggest_exit(self, track: PhaseTrack, now: float) -> str | None:
        """The way out to tell the model when it is stuck, else None."""
        return exit_suggestion(track.phase) if self.stuck(track, now) else None

    def forced_state(self, phase: Phase) -> Phase | None:
        """Where a stuck agent in ``phase`` goes by the policy; None to go on (soft).

        Hard moves a working phase to its STUCK_* phase, auto-finish moves to
        FINISHING; a STUCK_* phase past its own timeout moves to FINISHING under
        both (it has nowhere else to go).
        """
        if self.policy is StuckPolicy.SOFT or phase in (P.FINISHING, P.DONE, P.FAILED):
            return None
        if self.policy is StuckPolicy.HARD and phase in _STUCK:
            return _STUCK[phase]
        return P.FINISHING

    def agent_state(
        self, track: PhaseTrack, now: float, history: Sequence[PhaseStep] = (), *, last: int = 5
    ) -> dict[str, Any]:
        """The ``agent_state`` block of the model's payload, as JSON data.

        Args:
            track: The agent's counters.
            now: The time now, by the agent's recorded clock.
            history: The agent's steps; the latest ``last`` are included.
            last: How many steps of history to include.
        """
        reason = self.why(track, now)
        return {
            "current_state": track.phase.value,
            "duration_ms": round(track.duration(now) * 1000),
            "history": [
                step.model_dump(mode="json", include={"step_num", "state", "tool_name", "error"})
                for step in history[-last:]
            ]
            if last > 0
            else [],
            "stuck": reason is not None,
            "stuck_reason": reason.value if reason is not None else None,
            "suggested_exit": exit_suggestion(track.phase) if reason is not None else None,
            "next_states": sorted(p.value for p in PHASE_TRANSITIONS.get(track.phase, ())),
        }
