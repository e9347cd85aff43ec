"""Seeds 000 and 002: Thought → Validate → Action → Observation → Commit, with a rules engine.

The machine of seed 000 §2, supervised: the Thought stage asks the model for
a thought (and maybe a tool call); Validate runs the rules
(``arkhon_rheo.rules``): a retryable violation goes back to Thought with
``metadata["retry_reason"]`` and ``retry_count`` + 1, a terminal one ends the
run (``terminal_violation``, logged); Action runs the tool
(``arkhon_rheo.tools``), Observation records what it said, Commit decides:
"FINAL ANSWER" in the thought, max steps (a warning is logged), the
``terminated`` flag, or a total cost over the limit (``COST_LIMIT``) end the
run; otherwise back to Thought. More than 3 retries pause the session before
Thought at the ``human_approval`` gate (durably, with a store) until
``system.stored(machine, id).approve()`` (or ``abort()``); `rollback_to_step`
returns a stopped session to the Thought after an earlier step. Extended
state lives in ``metadata`` under the seed's keys: goal, retry_count,
total_cost, tool_history, summary, user_feedback (and retry_reason, exit_reason).

The model is a `ScriptedModel` by default, or the OpenAI-compatible server at
``OPENAI_BASE_URL`` when that is set. Run it with
``python tests/scenarios/thought_validate_machine.py [asyncio|trio]``.

This is the seeds' machine built by hand, kept as the reference that
tests/scenarios/test_thought_validate.py checks; ``react_agent(checks=Checks(rules=...))`` gives any
agent the Validate step in one line (examples/thought_validate_agent.py).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

import anyio
import structlog
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    Gate,
    Machine,
    Patch,
    StateView,
    TransitionCondition,
    TransitionEvent,
    record_call,
    stage,
)
from arkhon_rheo.models import OpenAIChatClient, Pricing
from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelClient,
    ModelReply,
    SystemMessage,
    ToolCall,
    Usage,
    UserMessage,
)
from arkhon_rheo.rules import PASS, Retryable, RuleSet, Terminal, Verdict, rule, validate_stage
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, tool

log = structlog.get_logger("thought_validate_agent")


class Node(enum.Enum):
    """Seed 000 §2.1's states, plus the end and failed states."""

    THOUGHT = "Thought"
    VALIDATE = "Validate"
    ACTION = "Action"
    OBSERVATION = "Observation"
    COMMIT = "Commit"
    END = "END"
    FAILED = "Failed"


class Exit(enum.Enum):
    """Why a run ended (``metadata["exit_reason"]``)."""

    GOAL_ACHIEVED = "goal_achieved"  # "FINAL ANSWER" in the last thought
    MAX_STEPS = "max_steps"
    TERMINATED = "terminated"  # the explicit flag
    COST_LIMIT = "cost_limit"
    TERMINAL_VIOLATION = "terminal_violation"  # a rule ended it (arkhon_rheo.rules)


class ReasoningStep(BaseModel):
    """One step of seed 002 §2.2: a thought, its action and what it observed."""

    model_config = ConfigDict(frozen=True)

    id: int
    thought: str
    action: str | None = None
    action_input: str = "{}"  # the tool call's JSON arguments
    call_id: str = ""
    result: str | None = None  # the tool's raw answer (Action)
    observation: str | None = None  # what was recorded of it (Observation)
    status: Literal["draft", "rejected", "executed", "observed", "committed"] = "draft"


class ReActState(AgentState):
    """Seed 000 §5.1: the primary state (lifecycle), the steps, metadata and the flag."""

    lifecycle: Node = Node.THOUGHT
    steps: tuple[ReasoningStep, ...] = ()
    terminated: bool = False
    approval: str | None = None  # written by the human at the human_approval gate


# -- tools -------------------------------------------------------------------------

FACTS = {"speed of light": "299792 km/s", "moon distance": "384400 km"}


@tool
def search(query: str) -> str:
    """Look a fact up.

    Args:
        query: What to look for.
    """
    return FACTS.get(query.lower(), f"no result for {query!r}")


@tool
def calculator(expression: str) -> str:
    """Add, subtract, multiply and divide numbers.

    Args:
        expression: Like ``384400 / 299792``.
    """
    allowed = set("0123456789.+-*/() ")
    if not set(expression) <= allowed:
        raise ValueError(f"only numbers and + - * / ( ) are allowed, got {expression!r}")
    return f"{eval(expression, {'__builtins__': {}}):.4g}"  # checked: arithmetic only


TOOLS = Toolbox(search, calculator)

# -- rules (seed 002 §4.1: invalid input → retry; rule violation → terminate) ----------

BLOCKED = ("eval", "exec", "__import__")  # seed 002 §6.1


@rule
def says_something(step: dict[str, Any]) -> Verdict:
    if not step["thought"].strip() and step["action"] is None:
        return Retryable("the reply was empty: think aloud or call a tool")
    return PASS


@rule
def known_tool(step: dict[str, Any]) -> Verdict:
    names = [spec.name for spec in TOOLS.specs]
    if step["action"] is not None and step["action"] not in names:
        return Retryable(f"unknown tool {step['action']!r}; use one of {names}")
    return PASS


@rule
def json_arguments(step: dict[str, Any]) -> Verdict:
    try:
        ok = isinstance(json.loads(step["action_input"]), dict)
    except json.JSONDecodeError:
        ok = False
    return PASS if ok else Retryable("the tool's arguments must be a JSON object")


@rule
def no_blocked_functions(step: dict[str, Any]) -> Verdict:
    for name in BLOCKED:
        if name in step["action_input"]:
            return Terminal(f"blocked function {name!r} in the tool input")
    return PASS


def proposed(view: StateView[ReActState]) -> dict[str, Any]:
    """What the rules see: seed 002 §5.2 keys its cache by (thought, action)."""
    step = view.steps[-1]
    return {"thought": step.thought, "action": step.action, "action_input": step.action_input}


# -- the machine -------------------------------------------------------------------

SYSTEM_PROMPT = (
    "Solve the goal step by step. Each reply is one thought; call at most one tool. "
    "When you know the answer, write 'FINAL ANSWER: ...'."
)
DEFAULT_PRICES = Pricing({"scripted": (1000.0, 2000.0)})  # per million tokens


def build_machine(
    model: ModelClient,
    *,
    max_steps: int = 8,
    cost_limit: float = 1.0,
    prices: Pricing = DEFAULT_PRICES,
    rules: RuleSet[dict[str, Any]] | None = None,
) -> Machine[ReActState]:
    """Seed 000's machine over ``model``; ``rules`` default to the four above."""
    rules = rules or RuleSet(says_something, known_tool, json_arguments, no_blocked_functions)

    def price(reply: ModelReply) -> float:
        try:
            return prices.cost(reply.usage, reply.model)
        except ConfigurationError:
            return 0.0  # a model the prices do not know costs nothing here

    @stage(
        reads={"steps", "metadata", "terminated", "approval"},
        writes={"steps", "metadata", "approval"},
        next=Node.VALIDATE,
    )
    async def thought(view: StateView[ReActState]) -> Patch:
        """ThoughtNode (seed 002 §3.2): build the prompt, ask the model, add a draft step."""
        metadata = dict(view.metadata)
        steps = list(view.steps)
        if steps and steps[-1].status == "draft":  # Validate sent it back
            steps[-1] = steps[-1].model_copy(update={"status": "rejected"})
        patch = Patch()
        if view.approval is not None:  # a human answered the human_approval gate
            feedback = dict(metadata.get("user_feedback", {}))
            feedback[f"step_{len(steps)}"] = view.approval
            metadata.update(user_feedback=feedback, retry_count=0)
            patch = patch.set(approval=None)
        if view.terminated:  # the flag: no more model calls; Commit ends the run
            steps.append(ReasoningStep(id=len(steps), thought="(terminated on request)"))
            return patch.set(steps=tuple(steps), metadata=metadata)
        retry = metadata.get("retry_reason")
        context = [
            f"Thought: {s.thought}\nAction: {s.action}\nObservation: {s.observation}"
            for s in steps[-5:]
            if s.status == "committed"
        ]
        prompt = f"Goal: {metadata.get('goal', '')}\n" + "\n".join(context)
        if retry:
            prompt += f"\nYour last reply was refused: {retry}. Try again."
        messages: list[Message] = [
            SystemMessage(content=SYSTEM_PROMPT),
            UserMessage(content=prompt),
        ]
        reply = await record_call(
            "model",
            {"step": len(steps), "prompt": prompt},
            lambda: model.complete(messages, tools=TOOLS.specs),
            returns=ModelReply,
        )
        call = reply.tool_calls[0] if reply.tool_calls else None
        steps.append(
            ReasoningStep(
                id=len(steps),
                thought=reply.text or "",
                action=call.name if call else None,
                action_input=(call.arguments or "{}") if call else "{}",
                call_id=call.id if call else "",
            )
        )
        metadata["total_cost"] = round(float(metadata.get("total_cost", 0.0)) + price(reply), 6)
        return patch.set(steps=tuple(steps), metadata=metadata)

    validate = validate_stage(
        rules,
        subject=proposed,
        reads={"steps"},
        passed=Node.ACTION,
        retry=Node.THOUGHT,
        terminal=Node.END,
    )

    @stage(reads={"steps", "metadata"}, writes={"steps", "metadata"}, next=Node.OBSERVATION)
    async def action(view: StateView[ReActState]) -> Patch:
        """ActionNode: run the validated step's tool (recorded as ``tool:<name>``)."""
        step = view.steps[-1]
        metadata = dict(view.metadata)
        result = None
        if step.action is not None:
            answer = await TOOLS.call(
                ToolCall(id=step.call_id, name=step.action, arguments=step.action_input)
            )
            result = f"Error: {answer.content}" if answer.is_error else answer.content
            metadata["tool_history"] = (*metadata.get("tool_history", ()), step.action)
        done = step.model_copy(update={"result": result, "status": "executed"})
        return Patch(steps=(*view.steps[:-1], done), metadata=metadata)

    @stage(reads={"steps"}, writes={"steps"}, next=Node.COMMIT)
    async def observation(view: StateView[ReActState]) -> Patch:
        """ObservationNode: record what the action gave (or that there was none)."""
        step = view.steps[-1]
        seen = step.result if step.result is not None else "(no action)"
        done = step.model_copy(update={"observation": seen, "status": "observed"})
        return Patch(steps=(*view.steps[:-1], done))

    @stage(
        reads={"steps", "metadata", "terminated"},
        writes={"steps", "metadata"},
        next=lambda s: Node.END if "exit_reason" in s.metadata else Node.THOUGHT,
    )
    async def commit(view: StateView[ReActState]) -> Patch:
        """Commit the step; should_terminate (§4.1) then compute_next_node (§5.2)."""
        steps = (*view.steps[:-1], view.steps[-1].model_copy(update={"status": "committed"}))
        metadata = dict(view.metadata)
        committed = [s for s in steps if s.status == "committed"]
        if len(committed) % 3 == 0:  # periodic summaries
            tools = [s.action for s in committed[-3:] if s.action]
            metadata["summary"] = f"{len(committed)} steps done; last tools: {tools}"
        exit_reason = None
        if "FINAL ANSWER" in steps[-1].thought:
            exit_reason = Exit.GOAL_ACHIEVED
        elif len(steps) >= max_steps:
            log.warning("max_steps_reached", steps=len(steps), max_steps=max_steps)
            exit_reason = Exit.MAX_STEPS
        elif view.terminated:
            exit_reason = Exit.TERMINATED
        elif float(metadata.get("total_cost", 0.0)) > cost_limit:
            exit_reason = Exit.COST_LIMIT
        if exit_reason is not None:
            metadata["exit_reason"] = exit_reason.value
        return Patch(steps=steps, metadata=metadata)

    def rules_passed(before: ReActState, after: ReActState) -> bool:
        """Action is reached only from a step every rule passed."""
        return all(result["outcome"] == "pass" for result in after.metadata.get("rules", ()))

    def needs_approval(state: ReActState) -> bool:
        """More than 3 retries: a human decides before the next thought (seed 000 §5.2)."""
        return (
            state.lifecycle is Node.THOUGHT
            and int(state.metadata.get("retry_count", 0)) > 3
            and state.approval is None
        )

    return Machine(
        name="seed-000-thought-validate",
        state_type=ReActState,
        initial=Node.THOUGHT,
        transitions={
            Node.THOUGHT: {Node.VALIDATE},
            Node.VALIDATE: {Node.ACTION, Node.THOUGHT, Node.END},
            Node.ACTION: {Node.OBSERVATION},
            Node.OBSERVATION: {Node.COMMIT},
            Node.COMMIT: {Node.THOUGHT, Node.END},
        },
        stages={
            Node.THOUGHT: thought,
            Node.VALIDATE: validate,
            Node.ACTION: action,
            Node.OBSERVATION: observation,
            Node.COMMIT: commit,
        },
        terminal={Node.END, Node.FAILED},
        failed=Node.FAILED,
        loop_state=Node.THOUGHT,
        invariants={
            Node.END: [lambda s: "exit_reason" in s.metadata],
            Node.ACTION: [lambda s: bool(s.steps) and s.steps[-1].status == "draft"],
        },
        transition_invariants={
            (Node.VALIDATE, Node.ACTION): [TransitionCondition("rules passed", rules_passed)],
        },
        gates=[Gate.when(needs_approval, name="human_approval", field="approval")],
    )


def exit_of(state: ReActState) -> Exit | None:
    """Why the run ended, if it did."""
    value = state.metadata.get("exit_reason")
    return None if value is None else Exit(value)


async def rollback_to_step(
    system: AgentSystem, machine: Machine[ReActState], session_id: str, step_id: int
) -> TransitionEvent:
    """Seed 000 §7.2: return a stopped session to the Thought after step ``step_id``.

    The steps after it are discarded (the log keeps them: the rollback is a new
    event, ``info`` saying ``rolled_back_from`` and ``rolled_back_to``); resume
    the session to go on from Thought.

    Raises:
        ConfigurationError: If ``step_id`` is not a step whose commit led back to Thought.
    """
    for event in await system.stored(machine, session_id).history():
        if event.stage == "commit" and event.to_state is Node.THOUGHT:
            committed = event.patch.values["steps"]
            if committed[-1].id == step_id:
                return await system.stored(machine, session_id).rollback(event.seq)
    raise ConfigurationError(
        f"invalid step_id {step_id}: no commit of that step led back to Thought"
    )


# -- the demo ----------------------------------------------------------------------


def reply(
    text: str, tool: str | None = None, arguments: str = "{}", tokens: int = 100
) -> ModelReply:
    """A scripted model reply: a thought, maybe one tool call, and what it cost in tokens."""
    calls = (ToolCall(id=f"c{tokens}-{tool}", name=tool, arguments=arguments),) if tool else ()
    return ModelReply(
        message=AssistantMessage(content=text, tool_calls=calls),
        usage=Usage(prompt_tokens=tokens, completion_tokens=tokens // 2),
        model="scripted",
    )


DEMO_SCRIPT = [
    reply("I need the distance to the moon.", "search", '{"query": "moon distance"}'),
    reply("Now divide it by the speed of light.", "web_browser", '{"url": "x"}'),  # retried
    reply("Divide by the speed of light.", "calculator", '{"expression": "384400 / 299792"}'),
    reply("FINAL ANSWER: light takes about 1.282 s to reach the moon."),
]


def trace(event: TransitionEvent) -> str:
    """One line of the readable trace."""
    line = (
        f"#{event.seq:<2} {event.stage:<11} {event.from_state.value:>11} -> {event.to_state.value}"
    )
    if event.stage == "thought" and "steps" in event.patch.values:
        step = event.patch.values["steps"][-1]
        line += f"  thought={step.thought!r}" + (f" tool={step.action}" if step.action else "")
    metadata = event.patch.values.get("metadata")
    if event.stage == "validate" and metadata is not None:
        outcome = metadata["rules"][-1]["outcome"] if metadata["rules"] else "pass"
        line += f"  rules: {outcome}"
        if outcome == "retryable":
            line += f" ({metadata['retry_reason']}; retry_count={metadata['retry_count']})"
    if event.stage == "action" and event.patch.values["steps"][-1].result is not None:
        line += f"  result={event.patch.values['steps'][-1].result!r}"
    if event.stage == "commit" and metadata is not None and "exit_reason" in metadata:
        line += f"  exit={Exit(metadata['exit_reason']).name}"
    return line


async def main() -> None:
    goal = "How long does light take to reach the moon?"
    if os.environ.get("OPENAI_BASE_URL"):
        async with OpenAIChatClient() as client:
            await run_demo(client, None, goal)
    else:
        await run_demo(ScriptedModel(DEMO_SCRIPT), ScriptedModel([]), goal)


async def run_demo(model: ModelClient, offline: ModelClient | None, goal: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "thought-validate.db"
        machine = build_machine(model)
        async with AgentSystem(path=path, seed=0) as system:
            handle = await system.start(machine, ReActState(metadata={"goal": goal}))
            async for event in handle.events():
                print(trace(event))
            result = await handle.result()
            report = None
            if offline is not None:  # replay the stored log without the model
                report = await system.stored(build_machine(offline), result.session_id).replay(
                    reexecute=True
                )
        state = result.state
        reason = exit_of(state)
        print(f"exit: {reason.name if reason else result.exit_reason.value}")
        print(f"tools: {list(state.metadata.get('tool_history', ()))}")
        print(
            f"retry_count={state.metadata.get('retry_count', 0)} "
            f"total_cost={state.metadata.get('total_cost', 0.0)} steps={len(state.steps)}"
        )
        if report is not None:
            verdict = "ok" if report.ok else f"diverged at {report.divergence}"
            print(f"replay: {verdict}; {report.reexecuted} stages re-executed without the model")


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
