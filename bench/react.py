"""What the ReAct engine adds to a supervised cycle, beyond the model and tool calls.

On each anyio backend, in one process and one run, N sessions in memory each run
K ReAct cycles (one model turn asking for one tool call, then that call), and
three machines do the same work:

(a) bare: a supervised loop with the engine's steps (start, then think -> act
    K times, then a last think) whose stages append one item to a ``History``
    and move on: the runtime alone, with the engine's 2K + 2 commits.
(b) bare + calls: the same loop, its think and act stages calling the same
    model (K + 1 times, as the engine does) and the same tool (K times) through
    ``record_call``, as a hand-written agent would: the runtime plus the model
    and tool calls themselves.
(c) engine: ``react_agent`` over that model and tool: prompts, the budget line,
    format checks, tool dispatch through a ``Toolbox``, usage and the clock.

One machine serves all N sessions of a kind (as in a service), over a stateless
model that asks for one tool call per turn until K results are in.

Printed: us per cycle (K cycles, 2K + 2 commits, per session) for each, and
the ratios engine/bare and engine/(bare + calls); the last is the engine's own
overhead. Timings are the best of 3 with ``time.perf_counter()`` (with
``--cpu``, ``time.process_time()``: the process's own CPU time, steadier on a
machine other work shares); nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import logging
import platform
import sys
import time
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
import anyio.lowlevel
import structlog

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    record_call,
    stage,
)
from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelReply,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import Limits, ReactState, react_agent
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from collections.abc import Sequence

L = Lifecycle
BACKENDS = ("asyncio", "trio")


class Sizes(NamedTuple):
    sessions: int
    cycles: int
    repeat: int


FULL = Sizes(sessions=200, cycles=10, repeat=3)
QUICK = Sizes(sessions=20, cycles=5, repeat=1)


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


TOOLS = Toolbox(lookup)


class CountingModel:
    """A stateless model shared by every session: a tool call per turn, then the answer.

    It counts the tool results in the conversation, so one instance serves any
    number of sessions (one machine for all of them, as a service would run).
    """

    def __init__(self, cycles: int) -> None:
        self.cycles = cycles

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        await anyio.lowlevel.checkpoint()
        done = sum(1 for message in messages if isinstance(message, ToolMessage))
        if done >= self.cycles or not tools:
            return ModelReply(message=AssistantMessage(content="done"))
        call = ToolCall(id=f"c{done}", name="lookup", arguments=f'{{"key": "k{done}"}}')
        return ModelReply(message=AssistantMessage(tool_calls=(call,)), finish_reason="tool_calls")


class LoopState(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    cycles: int = 10
    done: int = 0
    steps: History[str] = History()


def bare_machine(calls: bool, model: CountingModel) -> Machine[LoopState]:
    """The engine's steps without the engine: start, K think+act cycles, a last think.

    As many commits as a ReAct session of K cycles (2K + 2) and, with ``calls``,
    as many model calls (K + 1) and tool calls (K).
    """

    @stage(reads=set(), writes={"steps"}, next=L.THINKING)
    async def start(view: StateView[LoopState]) -> Patch:
        return Patch().append("steps", "task")

    @stage(
        reads={"cycles", "done"},
        writes={"steps"},
        next=lambda s: L.FINISHED if s.done >= s.cycles else L.ACTING,
    )
    async def think(view: StateView[LoopState]) -> Patch:
        if calls:
            message = UserMessage(content=f"turn {view.done}")
            await record_call(
                "model",
                {"turn": view.done},
                lambda: model.complete([message], tools=TOOLS.specs),
                returns=ModelReply,
            )
        return Patch().append("steps", "thought")

    @stage(reads={"done"}, writes={"steps", "done"}, next=L.THINKING)
    async def act(view: StateView[LoopState]) -> Patch:
        output = "K"
        if calls:
            call = ToolCall(id="c", name="lookup", arguments='{"key": "k"}')
            result: ToolMessage = await TOOLS.call(call)
            output = result.content
        return Patch(done=view.done + 1).append("steps", output)

    return Machine(
        name="bench-loop",
        state_type=LoopState,
        initial=L.INITIALIZED,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING, L.FINISHED},
            L.ACTING: {L.THINKING},
        },
        stages={L.INITIALIZED: start, L.THINKING: think, L.ACTING: act},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
    )


#: The clock the runs are timed with (``--cpu``: the process's CPU time).
CLOCK = [time.perf_counter]


async def run_bare(sizes: Sizes, calls: bool) -> float:
    """Seconds for N bare sessions of K cycles (with or without the calls)."""
    machine = bare_machine(calls, CountingModel(sizes.cycles))
    clock = CLOCK[0]
    async with AgentSystem(path=None, max_steps=10 * sizes.cycles + 10) as system:
        started = clock()
        async with anyio.create_task_group() as group:
            for _ in range(sizes.sessions):
                group.start_soon(system.run, machine, LoopState(cycles=sizes.cycles))
        return clock() - started


async def run_engine(sizes: Sizes) -> float:
    """Seconds for N ReAct sessions of K cycles."""
    agent = react_agent(
        CountingModel(sizes.cycles),
        TOOLS,
        limits=Limits(max_steps=sizes.cycles + 5),
    )
    results: list[Any] = []

    async def one() -> None:
        results.append(await system.run(agent, ReactState(task="look things up")))

    clock = CLOCK[0]
    async with AgentSystem(path=None, max_steps=10 * sizes.cycles + 10) as system:
        started = clock()
        async with anyio.create_task_group() as group:
            for _ in range(sizes.sessions):
                group.start_soon(one)
        elapsed = clock() - started
    bad = [r for r in results if not r.ok or r.state.tool_calls != sizes.cycles]
    if bad:
        raise RuntimeError(f"{len(bad)} engine sessions did not run their cycles: {bad[0]}")
    return elapsed


async def best(repeat: int, fn: Any, *args: Any) -> float:
    times: list[float] = []
    for _ in range(repeat):
        gc.collect()
        times.append(await fn(*args))
    return min(times)


async def run_backend(sizes: Sizes) -> None:
    cycles = sizes.sessions * sizes.cycles
    bare = await best(sizes.repeat, run_bare, sizes, False)
    calls = await best(sizes.repeat, run_bare, sizes, True)
    engine = await best(sizes.repeat, run_engine, sizes)
    for label, seconds in (
        ("(a) bare supervised loop", bare),
        ("(b) bare loop + model and tool calls", calls),
        ("(c) ReAct engine", engine),
    ):
        print(
            f"  {label:<40} {seconds / cycles * 1e6:8.1f} us/cycle "
            f"{cycles / seconds:10,.0f} cycles/s",
            flush=True,
        )
    print(
        f"  engine/bare {engine / bare:5.2f}x   engine/(bare + calls) {engine / calls:5.2f}x "
        "(the engine's own overhead)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--cpu", action="store_true", help="time with the process's CPU time")
    args = parser.parse_args(argv)
    if args.cpu:
        CLOCK[0] = time.process_time
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(
        f"arkhon_rheo ReAct engine bench (Python {platform.python_version()}, "
        f"anyio {version('anyio')}, pydantic {version('pydantic')}): "
        f"{sizes.sessions} sessions x {sizes.cycles} cycles in memory, best of {sizes.repeat}"
        f"{' (CPU time)' if args.cpu else ''}",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        anyio.run(run_backend, sizes, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
