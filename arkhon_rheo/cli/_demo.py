"""``arkhon-rheo demo``: a few hundred supervised ReAct agents under a seeded fault plan.

Every agent is the bundled ReAct engine (`arkhon_rheo.react.react_agent`)
over two tools, answered by scripted replies read off the conversation.
Faults come from the public `arkhon_rheo.testing.FaultPlan`, installed with
``AgentSystem(fault_plan=plan)`` and injected through the library's own seams:
the model answers some calls with a 429 and a ``Retry-After`` (retried under
the backoff) or a malformed tool call (the engine's format retry); the tools
fail transiently or time out (the stage retried); a few stage runs fail
recoverably (the stage restarted) or fatally (the session failed). Some agents
run with a gate before acting and pause for a human. Every decision is a hash
of the seed, the target, the agent and the call index, so the same seed gives
the same outcomes on asyncio and trio.

The machine is `demo_agent()`, importable as ``arkhon_rheo.cli:demo_agent``; it
holds no faults (the plan belongs to the run, not the machine), so every
command that needs a machine works on what the demo stored (``replay
--reexecute``, ``decide``, ``resume``, ``fork``): its model reads each reply
off the conversation, so it answers a session in any process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..protocols import AssistantMessage, Gate, ModelReply, ToolCall, ToolMessage, UserMessage
from ..react import Checks, Limits, ReactState, react_agent
from ..supervision import Backoff
from ..system import AgentSystem
from ..testing import FaultPlan
from ..tools import Toolbox, tool
from ._common import console, print_json, shown, store_file

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from ..protocols import Machine, Message, ToolSpec
    from ..system import SessionResult
    from ..testing import FaultCall, FaultRule

__all__ = ["demo", "demo_agent", "demo_plan"]

_CITIES = {"Lyon": 522, "Porto": 232, "Turku": 195, "Graz": 291, "Leeds": 536, "Tartu": 97}
_NAME = "demo-react-agent"
#: A 429's Retry-After, in seconds: short, so the demo waits for its rate limits briefly.
_RETRY_AFTER = 0.05


def _task(agent: int) -> str:
    city = list(_CITIES)[agent % len(_CITIES)]
    return f"[agent {agent}] How many people live in {city}, doubled?"


def _agent_of(messages: Sequence[Message]) -> int:
    for message in messages:
        if isinstance(message, UserMessage) and message.content.startswith("[agent "):
            return int(message.content[7 : message.content.index("]")])
    return 0


def _step(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str | ToolCall:
    """The reply to a conversation: look the city up, double it, answer.

    Read off the tool results so far, so a malformed reply, a failed tool call
    or a restarted stage changes nothing but when the next step comes.
    """
    agent = _agent_of(messages)
    city = list(_CITIES)[agent % len(_CITIES)]
    done = {
        message.name: message.content
        for message in messages
        if isinstance(message, ToolMessage) and not message.is_error
    }
    turn = sum(1 for message in messages if not isinstance(message, ToolMessage))
    if "add" in done:
        return f"{city} has {done.get('population', '?')} thousand people; doubled, {done['add']}."
    if not tools:  # a wrap-up turn: no tools on offer
        return f"I could not finish counting the people of {city}."
    if "population" in done:
        people = json.loads(done["population"])
        arguments = json.dumps({"a": people, "b": people})
        return ToolCall(id=f"c{agent}-{turn}", name="add", arguments=arguments)
    return ToolCall(id=f"c{agent}-{turn}", name="population", arguments=json.dumps({"city": city}))


class _DemoModel:
    """Answers each call with the reply `_step` reads off the conversation (no script kept)."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        await anyio.lowlevel.checkpoint()
        step = _step(messages, tools)
        if isinstance(step, ToolCall):
            message = AssistantMessage(tool_calls=(step,))
            return ModelReply(message=message, finish_reason="tool_calls", model="demo-scripted")
        return ModelReply(message=AssistantMessage(content=step), model="demo-scripted")


def _toolbox() -> Toolbox:
    @tool
    async def population(city: str) -> int:
        """The population of a city, in thousands.

        Args:
            city: The city's name.
        """
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
        return a + b

    return Toolbox(population, add)


def demo_agent(*, gated: bool = False) -> Machine[ReactState]:
    """The demo's ReAct agent: it injects no faults (the demo installs its plan around it).

    Pass it where a command needs the machine of a demo session:
    ``--machine arkhon_rheo.cli:demo_agent``.

    Args:
        gated: Pause before every tool round for a human decision.

    Returns:
        The machine (named ``demo-react-agent``).
    """
    return react_agent(
        _DemoModel(),
        _toolbox(),
        name=_NAME,
        limits=Limits(max_steps=8),
        checks=Checks(gates=[Gate.before("act")] if gated else ()),
    )


class _AgentKeyedPlan(FaultPlan):
    """A `FaultPlan` that decides each call by the agent's number, not its session id.

    A demo run's session ids carry a run prefix (so two runs share a file), and
    the plan hashes the session it decides for: keyed by ``agent-NNNN`` instead,
    the faults depend on the seed alone, whatever the prefix.
    """

    def __init__(self, seed: int, run: str) -> None:
        super().__init__(seed)
        self.run = run

    def decide(self, call: FaultCall) -> FaultRule | None:
        session = call.session_id
        if session is not None and session.startswith(self.run):
            call = dataclasses.replace(call, session_id="agent" + session[len(self.run) :])
        return super().decide(call)


def demo_plan(seed: int, rate: float, *, run: str = "") -> FaultPlan:
    """The demo's fault plan: the model, both tools and every stage, scaled by ``rate``.

    Args:
        seed: Decides every fault.
        rate: The share of model calls answered with a 429; the other faults
            are set in proportion to it.
        run: The prefix of the run's session ids; calls of those sessions are
            decided by the rest of the id (the agent's number) alone.

    Returns:
        The plan (install it with ``AgentSystem(fault_plan=plan)``).
    """
    plan = _AgentKeyedPlan(seed, run)
    plan.model().rate_limited(_RETRY_AFTER, rate=rate).malformed_reply(rate=rate / 4)
    plan.tool("population").tool_timeout(rate=rate / 4)
    plan.tool().transient("the tool's backend was unavailable (injected)", rate=rate / 8)
    plan.stage().recoverable("the stage's worker was lost (injected)", rate=rate / 10).fatal(
        "the API key was revoked (injected)", rate=rate / 50
    )
    return plan


def _gated(seed: int, agent: int, rate: float) -> bool:
    """Whether agent ``agent`` runs with a gate before acting (a hash of seed and agent)."""
    digest = hashlib.blake2b(f"{seed}\x00gate\x00{agent}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < rate


@dataclass
class _Tally:
    results: list[SessionResult[ReactState]] = field(default_factory=list)
    plan: FaultPlan | None = None


async def _run(args: argparse.Namespace, tally: _Tally) -> float:
    run = f"demo-{uuid.uuid4().hex[:6]}-"
    plan = tally.plan = demo_plan(args.seed, args.fault_rate, run=run)
    plain, gated = demo_agent(), demo_agent(gated=True)
    out = console()
    limiter = anyio.CapacityLimiter(args.concurrency)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[outcomes]}", markup=False),
        TimeElapsedColumn(),
        console=out,
        disable=not out.is_terminal,
    ) as progress:
        task = progress.add_task("agents", total=args.sessions, outcomes="")
        outcomes: Counter[str] = Counter()

        async def one(system: AgentSystem, agent: int) -> None:
            machine = gated if _gated(args.seed, agent, args.gate_rate) else plain
            async with limiter:
                result = await system.run(
                    machine, ReactState(task=_task(agent)), session_id=f"{run}{agent:04d}"
                )
            tally.results.append(result)
            outcomes[result.exit_reason.value] += 1
            shown = " ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            progress.update(task, advance=1, outcomes=f"{shown} | faults {len(plan.injected)}")

        began = time.perf_counter()
        async with (
            AgentSystem(
                path=args.store,
                seed=args.seed,
                backoff=Backoff(base=0.02, cap=0.5),
                fault_plan=plan,
            ) as system,
            anyio.create_task_group() as group,
        ):
            for agent in range(args.sessions):
                group.start_soon(one, system, agent)
        return time.perf_counter() - began


def demo(args: argparse.Namespace) -> int:
    """``arkhon-rheo demo``: run the agents, then print a summary and how to inspect them."""
    store_file(args.store)
    tally = _Tally()
    seconds = args.run(_run, args, tally)
    assert tally.plan is not None
    results = sorted(tally.results, key=lambda result: result.session_id)
    outcomes = Counter(result.exit_reason.value for result in results)
    exits = Counter(result.state.exit.value for result in results if result.state.exit is not None)
    commits = sum(result.steps for result in results)
    faults = {
        target: dict(sorted(kinds.items())) for target, kinds in sorted(tally.plan.counts().items())
    }
    summary: dict[str, Any] = {
        "store": args.store,
        "seed": args.seed,
        "sessions": len(results),
        "outcomes": dict(sorted(outcomes.items())),
        "agent_exits": dict(sorted(exits.items())),
        "retries": sum(result.retries for result in results),
        "restarts": sum(result.restarts for result in results),
        "faults": faults,
        "faults_injected": len(tally.plan.injected),
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
            f"arkhon-rheo decide {examples['paused']} approve --machine {machine} {store}"
        )
    commands.append(f"arkhon-rheo graph {machine}")
    summary["examples"] = examples
    summary["commands"] = commands
    if args.json:
        print_json(summary)
        return 0
    out = console()
    table = Table(
        title=f"{len(results)} supervised ReAct agents, fault plan seed {args.seed}",
        caption=f"fault rate {args.fault_rate}, gate rate {args.gate_rate}",
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    for reason, count in sorted(outcomes.items()):
        table.add_row(f"sessions {reason}", str(count))
    for reason, count in sorted(exits.items()):
        table.add_row(f"  agent exit: {reason}", str(count))
    table.add_row("transient retries", str(summary["retries"]))
    table.add_row("stage restarts", str(summary["restarts"]))
    for target, kinds in faults.items():
        injected = ", ".join(f"{kind} {count}" for kind, count in kinds.items())
        table.add_row(f"faults injected: {target}", injected)
    table.add_row("commits", str(commits))
    table.add_row("wall time (s)", f"{seconds:.2f}")
    table.add_row("commits/s", f"{summary['commits_per_second']}")
    out.print(table)
    out.print(shown(f"stored in {args.store}; inspect it with:"))
    for command in commands:
        out.print(shown(f"  {command}"))
    return 0
