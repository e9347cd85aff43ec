"""Does a long ReAct conversation cost more per turn as it grows? Engine work per cycle, by turn.

On each anyio backend, in one process and one run, ReAct sessions of T cycles
(a model turn asking for one tool call, then the call) run one at a time in
memory, over a scripted model whose own cost is constant (it counts its turns
itself; it never reads the conversation). The model notes the time of each of
its calls: the gap between two calls is one whole cycle of engine and runtime
work (the think step's commit, the act step and its commit, the next think
step up to the model call), the model's own constant cost aside.

Three context settings are compared: none (the whole conversation sent), a
``max_context_tokens`` the conversation always fits (every message estimated,
nothing dropped) and one that trims it to about 2,000 tokens.

Printed, for each: us per cycle around turns 10, 100 and 200 (the median of
the 9 cycles centred there, the best session of R; in the process's CPU
time), and the ratio turn 200 / turn 10: a conversation that costs no more
per turn as it grows stays near 1.0x. ``--durable`` runs the sessions on a
SQLite store (``batched``) instead, each commit encoded and written. Nothing
is asserted.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import anyio
import anyio.lowlevel
import structlog

from arkhon_rheo import AgentSystem, Durability
from arkhon_rheo.protocols import AssistantMessage, Message, ModelReply, ToolCall, ToolSpec
from arkhon_rheo.react import Limits, Memory, ReactState, react_agent
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from collections.abc import Sequence

BACKENDS = ("asyncio", "trio")
HALF = 4  # the window around a turn: HALF cycles either side


class Sizes(NamedTuple):
    turns: tuple[int, ...]
    repeat: int


FULL = Sizes(turns=(10, 100, 200), repeat=5)
QUICK = Sizes(turns=(10, 20), repeat=1)


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper() * 100  # a result of a few hundred characters, as tools give


TOOLS = Toolbox(lookup)


class ScriptedModel:
    """One session's model: a tool call per turn until ``cycles`` calls, then the answer.

    Its cost does not depend on the conversation: it counts its own turns and
    notes when each call came, in the process's CPU time (``process_time``: on
    a shared machine the other processes' work does not count).
    """

    def __init__(self, cycles: int) -> None:
        self.cycles = cycles
        self.calls: list[float] = []

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        self.calls.append(time.process_time())
        await anyio.lowlevel.checkpoint()
        done = len(self.calls) - 1
        if done >= self.cycles:
            return ModelReply(message=AssistantMessage(content="done"))
        call = ToolCall(id=f"c{done}", name="lookup", arguments=f'{{"key": "k{done}"}}')
        return ModelReply(message=AssistantMessage(tool_calls=(call,)), finish_reason="tool_calls")


#: The engine's context settings compared: none (the whole conversation sent),
#: a token budget the conversation always fits, one that trims it to ~2,000 tokens.
CONTEXTS = (
    ("whole conversation", None),
    ("max_context_tokens, fits", 10**7),
    ("max_context_tokens, trims", 2_000),
)


async def one_session(cycles: int, path: Path | None, context: int | None) -> list[float]:
    """The seconds of each cycle of one session of ``cycles`` cycles."""
    model = ScriptedModel(cycles)
    agent = react_agent(
        model,
        TOOLS,
        limits=Limits(max_steps=cycles + 5),
        memory=Memory(max_tokens=context),
    )
    system = AgentSystem(path=path, max_steps=3 * cycles + 10, durability=Durability.BATCHED)
    async with system:
        result = await system.run(agent, ReactState(task="look things up"))
    if not result.ok or result.state.tool_calls != cycles:
        raise RuntimeError(f"the session did not run its {cycles} cycles: {result}")
    return [b - a for a, b in zip(model.calls, model.calls[1:], strict=False)]


def at(gaps: list[float], turn: int) -> float:
    """The median cycle around ``turn`` (1-based), in seconds."""
    low = max(0, turn - 1 - HALF)
    return statistics.median(gaps[low : turn + HALF])


async def run_context(sizes: Sizes, durable: bool, context: int | None) -> dict[int, float]:
    """The best median cycle around each turn of ``sizes.turns``, in seconds."""
    cycles = max(sizes.turns) + HALF + 1
    best = dict.fromkeys(sizes.turns, float("inf"))
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(sizes.repeat):
            path = Path(tmp) / f"s{index}.db" if durable else None
            gaps = await one_session(cycles, path, context)
            for turn in sizes.turns:
                best[turn] = min(best[turn], at(gaps, turn))
    return best


async def run_backend(sizes: Sizes, durable: bool) -> None:
    first, last = sizes.turns[0], sizes.turns[-1]
    for label, context in CONTEXTS:
        best = await run_context(sizes, durable, context)
        cells = "  ".join(f"turn {turn}: {best[turn] * 1e6:7.1f}" for turn in sizes.turns)
        print(
            f"  {label:<26} us/cycle at {cells}   turn {last}/turn {first} "
            f"{best[last] / best[first]:5.2f}x",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--durable", action="store_true", help="on SQLite, batched")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(
        f"arkhon_rheo long-conversation bench (Python {platform.python_version()}, "
        f"anyio {version('anyio')}, pydantic {version('pydantic')}): one ReAct session at a "
        f"time, {'SQLite batched' if args.durable else 'in memory'}, best of {sizes.repeat}",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        anyio.run(run_backend, sizes, args.durable, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
