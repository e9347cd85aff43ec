"""A budgeted decision agent: contract slots, artifacts, decision reruns, nine exit reasons.

The agent answers a task by filling a contract: named slots (here
``capital``), each pending until an artifact (a tool result the agent
registered) is mapped to it. Its machine is decision → protocol_verify →
tool_execution → decision ..., then route_after_decision → exit. The decision
stage asks the model for one JSON decision a round:

- ``call_tool`` with a ``strategy`` (explore, exploit or render), a ``tool``,
  its ``arguments`` and the ``slot_id`` it works for goes through
  ``protocol_verify`` (the call's shape: the strategy, a known tool and slot,
  arguments its schema accepts) to ``tool_execution``, which runs the tool and
  registers its result as an artifact (``a1``, ``a2``, ... with a kind:
  search, document, fact, number);
- ``decision`` with ``show_artifacts`` / ``show_skills`` is a decision rerun:
  the next round shows those in full (each item spends a context read);
- ``complete`` / ``exit`` end the run with an answer, ``clarify`` ends it with
  a question for the user; any decision may ``map`` artifacts to slots
  (``{"capital": "a2"}``). Search results, errors and null values are not
  mappable.

Budgets are `arkhon_rheo.react.DecisionBudget`: a global `RoundBudget`
(decision rounds, tool calls, explore / exploit / render rounds, decision
reruns, context reads) and an advisory `SlotBudget` per slot. The model sees
the ``BUDGET_STATE`` line at the end of every round's journal; past the
must-finish gate the run ends with ``max_iterations`` unless an exploit
overdraft round is granted (a pending slot with exploit rounds left), in which
any other move is ``exploit_overdraft_blocked``.

The decision stage never sets ``exit_reason``: it sets ``pending_exit_reason``,
and ``route_after_decision`` promotes it, but first grants the single wrap-up
round when slots are pending and a mappable artifact is mapped to none (the
model may then only map and finish: a tool call ends the run, a rerun is
``wrapup_no_decision_rerun``). The stages' declared write sets make that a
rule the supervisor enforces: no other stage may write ``exit_reason``. The
``exit`` stage's final analysis turns a ``complete`` with pending slots into
``incomplete_contract`` (in ``final_exit_reason``).

Offline by default: a scripted model plays nine scenarios, one per exit
reason, each printed step by step, then every session is replayed without the
model. With ``OPENAI_BASE_URL`` set, a real OpenAI-compatible model runs the
first task. Run it with ``python examples/decision_agent.py [asyncio|trio]
[SCENARIO]`` (a scenario's name, like ``clarify``, runs that one alone).

``react_agent(limits=Limits(budget=GlobalBudget(...)))`` gives any ReAct agent the global
budget, its overdraft and wrap-up in one argument
(examples/budgeted_decision_agent.py); this machine, built by hand on the
public API, adds the contract, the artifacts and the reruns.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, Stage, StateView, record_call
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import (
    FrozenMap,
    ModelClient,
    ModelReply,
    SystemMessage,
    ToolCall,
    ToolRunner,
    UserMessage,
)
from arkhon_rheo.react import (
    STRATEGIES,
    DecisionBudget,
    RoundBudget,
    SlotBudget,
    format_budget_for_llm,
)
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, ToolError, tool

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from arkhon_rheo import SessionResult
    from arkhon_rheo.protocols import Message


class Step(enum.Enum):
    """The machine's states: its four stages, the router as a stage of its own, and the ends."""

    DECISION = "decision"
    PROTOCOL_VERIFY = "protocol_verify"
    TOOL_EXECUTION = "tool_execution"
    ROUTE = "route_after_decision"
    EXIT = "exit"
    DONE = "done"
    FAILED = "failed"


class Exit(enum.Enum):
    """Why a run ended: one scripted scenario each."""

    COMPLETE = "complete"
    CLARIFY = "clarify"
    MAX_ITERATIONS = "max_iterations"
    CONTEXT_READS_EXHAUSTED = "context_reads_exhausted"
    DECISION_NO_PROGRESS = "decision_no_progress"
    DECISION_RERUNS_EXHAUSTED = "decision_reruns_exhausted"
    WRAPUP_NO_DECISION_RERUN = "wrapup_no_decision_rerun"
    EXPLOIT_OVERDRAFT_BLOCKED = "exploit_overdraft_blocked"
    INCOMPLETE_CONTRACT = "incomplete_contract"


Action = Literal["call_tool", "decision", "complete", "exit", "clarify"]


class Decision(BaseModel):
    """One decision of the model, as its JSON reply gives it."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    action: Action
    strategy: str | None = None
    slot_id: str | None = None
    tool: str | None = None
    arguments: str | None = None  # the tool's arguments as JSON text
    show_artifacts: tuple[str, ...] = ()
    show_skills: tuple[str, ...] = ()
    map: FrozenMap[str, str] = Field(default_factory=FrozenMap)
    message: str | None = None


class Artifact(BaseModel):
    """A tool result, registered by tool_execution."""

    model_config = ConfigDict(frozen=True)
    artifact_id: str
    tool: str
    artifact_kind: str
    value: str | None
    error: str | None = None
    slot_id: str | None = None

    @property
    def mappable(self) -> bool:
        """Whether a slot may take it: not a search result, no error, a value that is not null."""
        return self.artifact_kind != "search" and self.error is None and self.value is not None


class Slot(BaseModel):
    """One slot of the contract: pending until an artifact is mapped to it."""

    model_config = ConfigDict(frozen=True)
    slot_id: str
    description: str
    artifact_id: str | None = None


def default_budget() -> DecisionBudget:
    """The budget of a session that names none: six rounds and six tool calls."""
    return DecisionBudget(RoundBudget(6, 6, 3, 3, 1, 2, 4))


class DecisionState(AgentState):
    """The agent's state: the routing fields, the contract, the artifacts and the budgets."""

    lifecycle: Step = Step.DECISION
    task: str = ""
    contract: tuple[Slot, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    budget: DecisionBudget = Field(default_factory=default_budget)
    budget_line: str = ""
    last_decision: Decision | None = None
    pending_exit_reason: Exit | None = None
    exit_reason: Exit | None = None
    final_exit_reason: Exit | None = None
    wrapup_round_used: bool = False
    is_wrapup_round: bool = False
    allow_exploit_overdraft: bool = False
    shown_artifacts: tuple[str, ...] = ()
    shown_skills: tuple[str, ...] = ()
    protocol_error: str | None = None
    notes: tuple[str, ...] = ()
    answer: str | None = None


# -- the tools, their artifact kinds and the skills --------------------------------------

PAGES = {
    "https://example.org/paris": "Paris is the capital of France (population 2.1 million).",
    "https://example.org/lyon": "Lyon is the third-largest city of France.",
}
FACTS = {"france.capital": "Paris"}


@tool
async def web_search(query: str) -> list[str]:
    """Search the offline corpus.

    Args:
        query: Words to look for.
    """
    words = query.lower().split()
    return [url for url, text in PAGES.items() if any(w in text.lower() for w in words)]


@tool
async def fetch_page(url: str) -> str:
    """Fetch a page of the offline corpus.

    Args:
        url: The page's address.
    """
    if url not in PAGES:
        raise ToolError(f"no page at {url}")
    return PAGES[url]


@tool
async def lookup(key: str) -> str | None:
    """Look up a fact by key; null when unknown.

    Args:
        key: The fact's key, like ``france.capital``.
    """
    return FACTS.get(key)


@tool
async def calculate(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


TOOLS = Toolbox(web_search, fetch_page, lookup, calculate)
KINDS = {"web_search": "search", "fetch_page": "document", "lookup": "fact", "calculate": "number"}
SKILLS = {
    "citation": "Cite a page by its URL after the fact it supports.",
    "mapping": "Map an artifact to a slot with map: {slot_id: artifact_id}.",
}

PROTOCOL = (
    "You decide one step at a time. Reply with one JSON object: "
    '{"action": "call_tool"|"decision"|"complete"|"exit"|"clarify", '
    '"strategy": "explore"|"exploit"|"render", "slot_id": "...", "tool": "...", '
    '"arguments": {...}, "show_artifacts": [...], "show_skills": [...], '
    '"map": {"slot_id": "artifact_id"}, "message": "..."}. Watch BUDGET_STATE: when '
    "decisions or tools are at 0, finish."
)


# -- pure helpers -----------------------------------------------------------------------


def pending_slots(contract: Sequence[Slot]) -> list[str]:
    """The ids of the slots no artifact is mapped to yet, in contract order."""
    return [slot.slot_id for slot in contract if slot.artifact_id is None]


def wrapup_eligible(contract: Sequence[Slot], artifacts: Sequence[Artifact]) -> bool:
    """Whether the wrap-up round applies: pending slots, and mappable artifacts mapped to none."""
    mapped = {slot.artifact_id for slot in contract}
    unmapped = [a for a in artifacts if a.mappable and a.artifact_id not in mapped]
    return bool(pending_slots(contract)) and bool(unmapped)


def parse_decision(text: str | None) -> tuple[Decision | None, str]:
    """The decision in a model reply.

    Args:
        text: The reply's text: one JSON object.

    Returns:
        The decision and ``""``, or None and what was wrong with the reply.
    """
    try:
        raw = json.loads(text or "")
    except json.JSONDecodeError as exc:
        return None, f"the reply is not JSON ({exc.msg})"
    if not isinstance(raw, dict):
        return None, "the reply is not a JSON object"
    if isinstance(raw.get("arguments"), dict):
        raw["arguments"] = json.dumps(raw["arguments"], sort_keys=True)
    try:
        return Decision.model_validate(raw), ""
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return None, f"{'.'.join(map(str, first['loc']))}: {first['msg']}"


def apply_mappings(
    contract: tuple[Slot, ...], artifacts: Sequence[Artifact], mappings: Mapping[str, str]
) -> tuple[tuple[Slot, ...], list[str]]:
    """Map artifacts to slots; a mapping that cannot apply is skipped with a note.

    Args:
        contract: The slots.
        artifacts: The artifacts registered so far.
        mappings: Slot id to artifact id, as the decision gave them.

    Returns:
        The contract after the mappings, and a note for each one skipped.
    """
    by_id = {a.artifact_id: a for a in artifacts}
    slots = {slot.slot_id: slot for slot in contract}
    notes: list[str] = []
    for slot_id, artifact_id in mappings.items():
        artifact = by_id.get(artifact_id)
        slot = slots.get(slot_id)
        if slot is None or slot.artifact_id is not None:
            notes.append(f"map {slot_id}<-{artifact_id} skipped: no pending slot {slot_id!r}")
        elif artifact is None or not artifact.mappable:
            notes.append(f"map {slot_id}<-{artifact_id} skipped: not a mappable artifact")
        else:
            slots[slot_id] = slot.model_copy(update={"artifact_id": artifact_id})
    return tuple(slots[slot.slot_id] for slot in contract), notes


def journal(view: StateView[DecisionState], line: str) -> str:
    """The session journal the decision model reads; the BUDGET_STATE line ends it."""
    rows = [f"TASK: {view.task}", "CONTRACT:"]
    for slot in view.contract:
        status = f"mapped to {slot.artifact_id}" if slot.artifact_id else "pending"
        rows.append(f"- {slot.slot_id} ({status}): {slot.description}")
    rows.append("ARTIFACTS:")
    for a in view.artifacts:
        shown = a.value if a.artifact_id in view.shown_artifacts else (a.value or "")[:40]
        rows.append(f"- {a.artifact_id} {a.tool} [{a.artifact_kind}]: {a.error or shown}")
    rows.extend(f"SKILL {name}: {SKILLS.get(name, 'unknown skill')}" for name in view.shown_skills)
    rows.extend(f"NOTE: {note}" for note in view.notes[-5:])
    if view.is_wrapup_round:
        rows.append("WRAPUP: map existing artifacts to pending slots; a tool call ends the run.")
    rows.append(line)
    return "\n".join(rows)


# -- the machine ------------------------------------------------------------------------


def build_machine(
    model: ModelClient,
    tools: ToolRunner = TOOLS,
    kinds: Mapping[str, str] = KINDS,
    *,
    name: str = "budgeted-decision",
) -> Machine[DecisionState]:
    """The decision agent's machine.

    Args:
        model: The model that decides each round (asked for JSON).
        tools: The tools a ``call_tool`` decision may run.
        kinds: The artifact kind of each tool's results (``search`` results are
            not mappable); a tool not named here gives ``result`` artifacts.
        name: The machine's name.

    Returns:
        The machine: decision, protocol_verify, tool_execution,
        route_after_decision and exit.
    """
    S = Step
    known_tools = {spec.name for spec in tools.specs}
    toolbox = tools if isinstance(tools, Toolbox) else None

    class Decide(
        Stage[DecisionState],
        name="decision",
        reads={
            "task",
            "contract",
            "artifacts",
            "budget",
            "shown_artifacts",
            "shown_skills",
            "notes",
            "is_wrapup_round",
        },
        writes={
            "last_decision",
            "pending_exit_reason",
            "budget",
            "budget_line",
            "allow_exploit_overdraft",
            "contract",
            "shown_artifacts",
            "shown_skills",
            "notes",
            "answer",
        },
    ):
        async def execute(self, view: StateView[DecisionState]) -> Patch:
            budget = view.budget
            wrapup = view.is_wrapup_round
            pending: Exit | None = None
            overdraft = False
            slots = pending_slots(view.contract)
            if budget.must_finish:
                if not wrapup and budget.exploit_overdraft_available(slots):
                    budget, overdraft = budget.take_overdraft_round(), True
                else:
                    pending = Exit.MAX_ITERATIONS
            line = format_budget_for_llm(
                budget, slots[0] if slots else None, wrapup=wrapup, overdraft=overdraft
            )
            text = journal(view, line)
            number = budget.global_budget.decision_rounds_used + 1
            messages: list[Message] = [SystemMessage(content=PROTOCOL), UserMessage(content=text)]
            reply = await record_call(
                "model",
                {"round": number, "journal": text},
                functools.partial(model.complete, messages, json_mode=True),
                returns=ModelReply,
            )
            budget = replace(budget, global_budget=budget.global_budget.spend(decision_rounds=1))
            decision, problem = parse_decision(reply.text)
            notes: list[str] = []
            patch = Patch(shown_artifacts=(), shown_skills=())
            if decision is None:
                pending = Exit.DECISION_NO_PROGRESS
                notes.append(f"round {number}: unusable decision: {problem}")
            else:
                contract, skipped = apply_mappings(view.contract, view.artifacts, decision.map)
                notes.extend(skipped)
                patch = patch.set(contract=contract)
                action = decision.action
                if action == "call_tool":
                    if wrapup:
                        notes.append(f"round {number}: tool call in the wrap-up round: exit")
                    elif overdraft and decision.strategy != "exploit":
                        pending = Exit.EXPLOIT_OVERDRAFT_BLOCKED
                elif action == "decision":
                    wanted = len(decision.show_artifacts) + len(decision.show_skills)
                    left = budget.global_budget
                    if wrapup:
                        pending = Exit.WRAPUP_NO_DECISION_RERUN
                    elif overdraft:
                        pending = Exit.EXPLOIT_OVERDRAFT_BLOCKED
                    elif not wanted:
                        pending = Exit.DECISION_NO_PROGRESS
                    elif pending is None and left.remaining_decision_reruns <= 0:
                        pending = Exit.DECISION_RERUNS_EXHAUSTED
                    elif pending is None and left.remaining_context_reads < wanted:
                        pending = Exit.CONTEXT_READS_EXHAUSTED
                    elif pending is None:
                        budget = replace(budget, global_budget=left.spend(decision_reruns=1))
                        budget = budget.spend_context_reads(wanted, decision.slot_id)
                        patch = patch.set(
                            shown_artifacts=decision.show_artifacts,
                            shown_skills=decision.show_skills,
                        )
                elif action == "clarify":
                    pending = Exit.CLARIFY
                    patch = patch.set(answer=decision.message)
                else:
                    pending = Exit.COMPLETE
                    patch = patch.set(answer=decision.message)
            structlog.get_logger("decision_agent").info(
                "decision", round=number, decision=decision, pending=pending
            )
            return patch.set(
                last_decision=decision,
                pending_exit_reason=pending,
                budget=budget,
                budget_line=line,
                allow_exploit_overdraft=overdraft,
                notes=(*view.notes, *notes),
            )

        def next(self, state: DecisionState) -> enum.Enum:
            decision = state.last_decision
            if state.pending_exit_reason is not None or decision is None:
                return S.ROUTE
            if decision.action == "call_tool":
                return S.ROUTE if state.is_wrapup_round else S.PROTOCOL_VERIFY
            return S.DECISION  # a decision rerun

    class Route(
        Stage[DecisionState],
        name="route_after_decision",
        reads={"pending_exit_reason", "exit_reason", "wrapup_round_used", "contract", "artifacts"},
        writes={"exit_reason", "pending_exit_reason", "is_wrapup_round", "wrapup_round_used"},
    ):
        async def execute(self, view: StateView[DecisionState]) -> Patch:
            exit_reason = view.pending_exit_reason or view.exit_reason
            if (
                exit_reason is not None
                and not view.wrapup_round_used
                and wrapup_eligible(view.contract, view.artifacts)
            ):
                return Patch(
                    exit_reason=None,
                    pending_exit_reason=None,
                    is_wrapup_round=True,
                    wrapup_round_used=True,
                )
            return Patch(exit_reason=exit_reason, is_wrapup_round=False)

        def next(self, state: DecisionState) -> enum.Enum:
            return S.DECISION if state.is_wrapup_round else S.EXIT

    class ProtocolVerify(
        Stage[DecisionState],
        name="protocol_verify",
        reads={"last_decision", "contract", "notes"},
        writes={"protocol_error", "notes"},
    ):
        async def execute(self, view: StateView[DecisionState]) -> Patch:
            problem = self._problem(view.last_decision, view.contract)
            if problem is None:
                return Patch(protocol_error=None)
            return Patch(protocol_error=problem, notes=(*view.notes, f"blocked: {problem}"))

        @staticmethod
        def _problem(decision: Decision | None, contract: Sequence[Slot]) -> str | None:
            if decision is None or decision.action != "call_tool":
                return "no tool call to verify"
            if decision.strategy not in STRATEGIES:
                return f"strategy {decision.strategy!r} is not one of {', '.join(STRATEGIES)}"
            if decision.tool not in known_tools:
                return f"unknown tool {decision.tool!r}; the tools are {sorted(known_tools)}"
            if decision.slot_id is not None and decision.slot_id not in {
                s.slot_id for s in contract
            }:
                return f"unknown slot {decision.slot_id!r}"
            try:
                arguments = json.loads(decision.arguments or "{}")
            except json.JSONDecodeError as exc:
                return f"the arguments of {decision.tool} are not JSON ({exc.msg})"
            if not isinstance(arguments, dict):
                return f"the arguments of {decision.tool} must be a JSON object"
            if toolbox is not None:
                try:
                    toolbox[decision.tool].validate(arguments)
                except ValidationError as exc:
                    first = exc.errors(include_url=False)[0]
                    where = ".".join(map(str, first["loc"]))
                    return f"bad arguments for {decision.tool}: {where}: {first['msg']}"
            return None

        def next(self, state: DecisionState) -> enum.Enum:
            return S.DECISION if state.protocol_error else S.TOOL_EXECUTION

    class ToolExecution(
        Stage[DecisionState],
        name="tool_execution",
        reads={"last_decision", "artifacts", "budget"},
        writes={"artifacts", "budget"},
    ):
        async def execute(self, view: StateView[DecisionState]) -> Patch:
            decision = view.last_decision
            assert decision is not None
            assert decision.tool is not None
            number = len(view.artifacts) + 1
            call = ToolCall(
                id=f"call-{number}", name=decision.tool, arguments=decision.arguments or "{}"
            )
            result = await tools.call(call)
            error = result.content if result.is_error else None
            value = (
                None if error is not None or result.content.strip() == "null" else result.content
            )
            artifact = Artifact(
                artifact_id=f"a{number}",
                tool=decision.tool,
                artifact_kind=kinds.get(decision.tool, "result"),
                value=value,
                error=error,
                slot_id=decision.slot_id,
            )
            strategy = decision.strategy
            assert strategy in STRATEGIES
            budget = view.budget.spend_round(strategy, decision.slot_id)
            budget = replace(budget, global_budget=budget.global_budget.spend(tool_calls=1))
            return Patch(artifacts=(*view.artifacts, artifact), budget=budget)

        def next(self, state: DecisionState) -> enum.Enum:
            return S.DECISION

    class FinalAnalysis(
        Stage[DecisionState],
        name="exit",
        reads={"exit_reason", "contract"},
        writes={"final_exit_reason"},
    ):
        async def execute(self, view: StateView[DecisionState]) -> Patch:
            reason = view.exit_reason
            if reason in (None, Exit.COMPLETE):
                reason = Exit.INCOMPLETE_CONTRACT if pending_slots(view.contract) else Exit.COMPLETE
            return Patch(final_exit_reason=reason)

        def next(self, state: DecisionState) -> enum.Enum:
            return S.DONE

    return Machine(
        name=name,
        state_type=DecisionState,
        initial=S.DECISION,
        transitions={
            S.DECISION: {S.PROTOCOL_VERIFY, S.DECISION, S.ROUTE},
            S.PROTOCOL_VERIFY: {S.TOOL_EXECUTION, S.DECISION},
            S.TOOL_EXECUTION: {S.DECISION},
            S.ROUTE: {S.DECISION, S.EXIT},
            S.EXIT: {S.DONE},
        },
        stages={
            S.DECISION: Decide,
            S.PROTOCOL_VERIFY: ProtocolVerify,
            S.TOOL_EXECUTION: ToolExecution,
            S.ROUTE: Route,
            S.EXIT: FinalAnalysis,
        },
        terminal={S.DONE, S.FAILED},
        failed=S.FAILED,
        loop_state=S.DECISION,
        invariants={
            S.TOOL_EXECUTION: [
                lambda s: s.protocol_error is None and s.pending_exit_reason is None,
            ],
            S.DONE: [lambda s: s.final_exit_reason is not None],
        },
    )


# -- scenarios, one per exit reason -----------------------------------------------------


def task_state(
    task: str = "What is the capital of France?",
    *,
    budget: RoundBudget | None = None,
    slots: Mapping[str, str] | None = None,
    stage: SlotBudget | None = None,
) -> DecisionState:
    """A fresh session: the task, its contract slots, and their budgets."""
    slots = {"capital": "The capital of France"} if slots is None else slots
    stages = {slot_id: stage or SlotBudget(2, 2, 1, 2) for slot_id in slots}
    return DecisionState(
        task=task,
        contract=tuple(Slot(slot_id=k, description=v) for k, v in slots.items()),
        budget=DecisionBudget(budget or RoundBudget(6, 6, 3, 3, 1, 2, 4), FrozenMap(stages)),
    )


def say(action: str, **fields: Any) -> str:
    """A scripted decision: the JSON the model replies with."""
    return json.dumps({"action": action, **fields})


def use(tool_name: str, strategy: str = "explore", **arguments: Any) -> str:
    """A scripted ``call_tool`` decision for the ``capital`` slot."""
    return say(
        "call_tool", strategy=strategy, slot_id="capital", tool=tool_name, arguments=arguments
    )


SEARCH = use("web_search", query="capital France")
FETCH = use("fetch_page", "exploit", url="https://example.org/paris")
LOOKUP = use("lookup", "exploit", key="france.capital")

#: name -> (initial state, the scripted model's decisions), one scenario per exit reason.
SCENARIOS: dict[str, tuple[DecisionState, list[str]]] = {
    "complete": (
        task_state(),
        [SEARCH, FETCH, say("complete", map={"capital": "a2"}, message="Paris")],
    ),
    "clarify": (task_state(), [say("clarify", message="Which France do you mean?")]),
    "max_iterations": (
        task_state(budget=RoundBudget(2, 6, 3, 0, 1, 2, 4)),
        [SEARCH, SEARCH, SEARCH],
    ),
    "context_reads_exhausted": (
        task_state(budget=RoundBudget(6, 6, 3, 3, 1, 2, 1)),
        [SEARCH, say("decision", show_artifacts=["a1"], show_skills=["citation"])],
    ),
    "decision_no_progress": (task_state(), [say("decision")]),
    "decision_reruns_exhausted": (
        task_state(budget=RoundBudget(6, 6, 3, 3, 1, 1, 4)),
        [say("decision", show_skills=["mapping"]), say("decision", show_skills=["citation"])],
    ),
    "wrapup_no_decision_rerun": (
        task_state(),
        [LOOKUP, say("complete", message="done"), say("decision", show_artifacts=["a1"])],
    ),
    "exploit_overdraft_blocked": (
        task_state(budget=RoundBudget(1, 6, 3, 3, 1, 2, 4)),
        [SEARCH, SEARCH],
    ),
    "incomplete_contract": (task_state(), [SEARCH, say("complete", message="Paris, I think")]),
}


def describe(decision: Decision | None) -> str:
    """A decision in one short line, for the trace."""
    if decision is None:
        return "(unusable)"
    if decision.action == "call_tool":
        return f"call_tool {decision.strategy} {decision.tool} {decision.arguments}"
    extra = decision.show_artifacts + decision.show_skills
    mapped = f" map {dict(decision.map)}" if decision.map else ""
    return f"{decision.action}{' ' + ' '.join(extra) if extra else ''}{mapped}"


async def run_traced(
    system: AgentSystem, machine: Machine[DecisionState], state: DecisionState, session_id: str
) -> SessionResult[DecisionState]:
    """Run one session, printing each step as it commits."""
    handle = await system.start(machine, state, session_id=session_id)
    async for event in handle.events():
        if event.stage is None:
            continue
        values = event.patch.values
        print(
            f"  #{event.seq:<2} {event.stage:<20} "
            f"{event.from_state.value} -> {event.to_state.value}"
        )
        if event.stage == "decision":
            print("      " + str(values["budget_line"]).replace("\n", "\n      "))
            print(f"      decided: {describe(values['last_decision'])}", end="")
            pending = values["pending_exit_reason"]
            print(f" (pending_exit_reason={pending.value})" if pending else "")
        elif event.stage == "protocol_verify" and values.get("protocol_error"):
            print(f"      blocked: {values['protocol_error']}")
        elif event.stage == "tool_execution":
            a = values["artifacts"][-1]
            print(f"      {a.artifact_id} {a.tool} [{a.artifact_kind}]: {a.error or a.value}")
        elif event.stage == "route_after_decision":
            wrapup = " (wrap-up round)" if values.get("is_wrapup_round") else ""
            print(f"      exit_reason={getattr(values['exit_reason'], 'value', None)}{wrapup}")
    result = await handle.result()
    final = result.state.final_exit_reason
    print(f"  exit: {final.value if final else result.exit_reason.value}")
    return result


async def main(only: str | None = None) -> None:
    """Run the scenarios (or the one named ``only``), then replay them without the model.

    Args:
        only: A scenario's name; None runs all nine.
    """
    if os.environ.get("OPENAI_BASE_URL"):  # a real OpenAI-compatible server
        async with OpenAIChatClient() as client, AgentSystem(path=None) as system:
            print("== a real model: what is the capital of France?")
            await run_traced(system, build_machine(client), task_state(), "real")
        return
    if only is not None and only not in SCENARIOS:
        raise SystemExit(f"no scenario {only!r}; the scenarios are {', '.join(SCENARIOS)}")
    names = [only] if only else list(SCENARIOS)
    with tempfile.TemporaryDirectory() as folder:
        async with AgentSystem(path=Path(folder) / "decisions.db", seed=1) as system:
            for name in names:
                state, script = SCENARIOS[name]
                print(f"== scenario {name}")
                result = await run_traced(system, build_machine(ScriptedModel(script)), state, name)
                final = result.state.final_exit_reason
                assert final is not None, name
                assert final.value == name, (name, final)
                slots = ", ".join(
                    f"{slot.slot_id}={slot.artifact_id or 'pending'}"
                    for slot in result.state.contract
                )
                print(f"  answer: {result.state.answer}; slots: {slots}")
            offline = build_machine(ScriptedModel([]))  # no model at all
            replays = [await system.stored(offline, name).replay(reexecute=True) for name in names]
    ok = sum(report.ok for report in replays)
    print(
        f"replay: {ok}/{len(replays)} sessions re-executed on their recorded calls, "
        "without the model"
    )


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    anyio.run(main, sys.argv[2] if len(sys.argv) > 2 else None, backend=backend)
