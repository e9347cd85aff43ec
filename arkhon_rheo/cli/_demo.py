"""``arkhon-rheo demo``: a few hundred supervised ReAct agents under injected faults.

Every agent is the bundled ReAct engine (`arkhon_rheo.react.react_agent`)
over two tools, answered by `ScriptedModel` scripts. Faults come from one
seeded schedule, `DemoFaults`: which model turns first fail (transient: a
rate limit, retried with backoff; recoverable: a garbled reply, the stage
restarted; fatal: a revoked key, the session fails), which tool calls fail
transiently, and which sessions stop at a human gate before acting. It is the
one place a fault plan plugs in: swap its two methods for a plan's.

The machine is `demo_agent()`, importable as ``arkhon_rheo.cli:demo_agent``, so
every command that needs a machine works on what the demo stored (``replay
--reexecute``, ``decide``, ``resume``, ``fork``): its model picks the script of
each session and turn from the conversation, so it answers in any process.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._agents import AgentSystem
from .._errors import Fatal, Recoverable, Transient
from ..protocols import AssistantMessage, Gate, ModelReply, ToolCall, UserMessage
from ..react import ReactState, react_agent
from ..supervision import Backoff
from ..testing import ScriptedModel
from ..tools import Toolbox, tool
from ._common import console, print_json

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from .._agents import SessionResult
    from ..protocols import Machine, Message, ToolSpec
    from ..testing import Step

__all__ = ["DemoFaults", "demo", "demo_agent"]

_CITIES = {"Lyon": 522, "Porto": 232, "Turku": 195, "Graz": 291, "Leeds": 536, "Tartu": 97}
_NAME = "demo-react-agent"


@dataclass
class DemoFaults:
    """The demo's seeded fault schedule: what fails, where, in which session.

    Attributes:
        seed: Seeds every decision; the same seed gives the same faults.
        model_rate: The chance that a model turn's first call fails.
        tool_rate: The chance that a tool call fails transiently.
        gate_rate: The chance that a session pauses for a human before acting.
    """

    seed: int = 0
    model_rate: float = 0.2
    tool_rate: float = 0.05
    gate_rate: float = 0.05
    _tool_calls: Counter[str] = field(default_factory=Counter)

    def model_faults(self, session: int, turn: int) -> list[Exception]:
        """The errors the model raises on turn ``turn`` of session ``session``, in order."""
        rng = random.Random(f"{self.seed}:model:{session}:{turn}")
        if rng.random() >= self.model_rate:
            return []
        roll = rng.random()
        if roll < 0.6:
            return [Transient("rate limited (injected)")]
        if roll < 0.9:
            return [Recoverable("the reply was garbled (injected)")]
        return [Fatal("the API key was revoked (injected)")]

    def tool_fault(self, name: str) -> Exception | None:
        """The error the next call of tool ``name`` raises, if any (counted per tool)."""
        self._tool_calls[name] += 1
        rng = random.Random(f"{self.seed}:tool:{name}:{self._tool_calls[name]}")
        return Transient(f"{name} timed out (injected)") if rng.random() < self.tool_rate else None

    def gated(self, session: int) -> bool:
        """Whether session ``session`` pauses at the gate before its tool calls."""
        return random.Random(f"{self.seed}:gate:{session}").random() < self.gate_rate


def _task(session: int) -> str:
    city = list(_CITIES)[session % len(_CITIES)]
    return f"[agent {session}] How many people live in {city}, doubled?"


def _session_of(messages: Sequence[Message]) -> int:
    for message in messages:
        if isinstance(message, UserMessage) and message.content.startswith("[agent "):
            return int(message.content[7 : message.content.index("]")])
    return 0


class _DemoModel:
    """Answers each session's turns from `ScriptedModel` scripts, chosen by the conversation.

    A session and its turn are read from the messages (the task names the
    agent; the turn is the number of assistant messages so far), so the same
    model answers a session in any process: the demo, a ``resume`` or a
    ``decide`` later.
    """

    def __init__(self, faults: DemoFaults) -> None:
        self.faults = faults
        self._scripts: dict[tuple[int, int], ScriptedModel] = {}

    def _script(self, session: int, turn: int) -> list[Step]:
        city = list(_CITIES)[session % len(_CITIES)]
        answer: Step
        if turn == 0:
            answer = ToolCall(
                id=f"c{session}-1", name="population", arguments=f'{{"city": "{city}"}}'
            )
        elif turn == 1:
            people = _CITIES[city]
            answer = ToolCall(
                id=f"c{session}-2", name="add", arguments=f'{{"a": {people}, "b": {people}}}'
            )
        else:
            answer = f"{city} has {_CITIES[city]} thousand people; doubled, {2 * _CITIES[city]}."
        return [*self.faults.model_faults(session, turn), answer]

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        session = _session_of(messages)
        turn = sum(1 for message in messages if isinstance(message, AssistantMessage))
        model = self._scripts.get((session, turn))
        if model is None:
            model = self._scripts[(session, turn)] = ScriptedModel(self._script(session, turn))
        reply = await model.complete(messages, tools=tools, json_mode=json_mode)
        if not model.script:
            del self._scripts[(session, turn)]  # answered: a later call is a new turn's
        return reply


def _toolbox(faults: DemoFaults) -> Toolbox:
    @tool
    async def population(city: str) -> int:
        """The population of a city, in thousands.

        Args:
            city: The city's name.
        """
        error = faults.tool_fault("population")
        if error is not None:
            raise error
        if city not in _CITIES:
            raise ValueError(f"no data for {city!r}")
        return _CITIES[city]

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        error = faults.tool_fault("add")
        if error is not None:
            raise error
        return a + b

    return Toolbox(population, add)


def demo_agent(faults: DemoFaults | None = None, *, gated: bool = False) -> Machine[ReactState]:
    """The demo's ReAct agent; called with no arguments, it injects no faults.

    Pass it where a command needs the machine of a demo session:
    ``--machine arkhon_rheo.cli:demo_agent``.

    Args:
        faults: The fault schedule; none by default.
        gated: Pause before every tool round for a human decision.

    Returns:
        The machine (named ``demo-react-agent``).
    """
    faults = faults or DemoFaults(model_rate=0, tool_rate=0, gate_rate=0)
    return react_agent(
        _DemoModel(faults),
        _toolbox(faults),
        name=_NAME,
        max_steps=8,
        gates=[Gate.before("act")] if gated else (),
    )


@dataclass
class _Tally:
    results: list[SessionResult[ReactState]] = field(default_factory=list)


async def _run(args: argparse.Namespace, tally: _Tally) -> float:
    faults = DemoFaults(
        seed=args.seed,
        model_rate=args.fault_rate,
        tool_rate=args.fault_rate / 4,
        gate_rate=args.gate_rate,
    )
    plain, gated = demo_agent(faults), demo_agent(faults, gated=True)
    out = console()
    prefix = f"demo-{uuid.uuid4().hex[:6]}"
    limiter = anyio.CapacityLimiter(args.concurrency)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[outcomes]}"),
        TimeElapsedColumn(),
        console=out,
        disable=not out.is_terminal,
    ) as progress:
        task = progress.add_task("agents", total=args.sessions, outcomes="")
        outcomes: Counter[str] = Counter()

        async def one(system: AgentSystem, index: int) -> None:
            machine = gated if faults.gated(index) else plain
            async with limiter:
                result = await system.run(
                    machine, ReactState(task=_task(index)), session_id=f"{prefix}-{index:04d}"
                )
            tally.results.append(result)
            outcomes[result.exit_reason.value] += 1
            progress.update(
                task, advance=1, outcomes=" ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            )

        began = time.perf_counter()
        async with (
            AgentSystem(
                path=args.store, seed=args.seed, backoff=Backoff(base=0.02, cap=0.5)
            ) as system,
            anyio.create_task_group() as group,
        ):
            for index in range(args.sessions):
                group.start_soon(one, system, index)
        return time.perf_counter() - began


def demo(args: argparse.Namespace) -> int:
    """``arkhon-rheo demo``: run the agents, then print a summary and how to inspect them."""
    tally = _Tally()
    seconds = args.run(_run, args, tally)
    results = sorted(tally.results, key=lambda result: result.session_id)
    outcomes = Counter(result.exit_reason.value for result in results)
    exits = Counter(result.state.exit.value for result in results if result.state.exit is not None)
    commits = sum(result.steps for result in results)
    summary: dict[str, Any] = {
        "store": args.store,
        "sessions": len(results),
        "outcomes": dict(sorted(outcomes.items())),
        "agent_exits": dict(sorted(exits.items())),
        "retries": sum(result.retries for result in results),
        "restarts": sum(result.restarts for result in results),
        "commits": commits,
        "seconds": round(seconds, 3),
        "commits_per_second": round(commits / seconds, 1) if seconds else None,
    }
    examples = {
        reason: next(r.session_id for r in results if r.exit_reason.value == reason)
        for reason in outcomes
    }
    machine = "arkhon_rheo.cli:demo_agent"
    store = f"--store {args.store}"
    commands = [f"arkhon-rheo sessions {store}", f"arkhon-rheo sessions --status failed {store}"]
    if "finished" in examples:
        sid = examples["finished"]
        commands += [
            f"arkhon-rheo show {sid} {store}",
            f"arkhon-rheo graph {sid} {store}",
            f"arkhon-rheo replay {sid} --reexecute --machine {machine} {store}",
        ]
    if "failed" in examples:
        commands.append(f"arkhon-rheo show {examples['failed']} {store}")
    if "paused" in examples:
        commands.append(
            f"arkhon-rheo decide {examples['paused']} resume --machine {machine} {store}"
        )
    commands.append(f"arkhon-rheo graph {machine}")
    summary["examples"] = examples
    summary["commands"] = commands
    if args.json:
        print_json(summary)
        return 0
    out = console()
    table = Table(title=f"{len(results)} supervised ReAct agents, seed {args.seed}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for reason, count in sorted(outcomes.items()):
        table.add_row(f"sessions {reason}", str(count))
    for reason, count in sorted(exits.items()):
        table.add_row(f"  agent exit: {reason}", str(count))
    table.add_row("transient retries", str(summary["retries"]))
    table.add_row("stage restarts", str(summary["restarts"]))
    table.add_row("commits", str(commits))
    table.add_row("wall time (s)", f"{seconds:.2f}")
    table.add_row("commits/s", f"{summary['commits_per_second']}")
    out.print(table)
    out.print(f"stored in {args.store}; inspect it with:")
    for command in commands:
        out.print(f"  {command}", markup=False)
    return 0
