"""Streaming: watch a stage's model reply arrive token by token, between the commits.

A stand-in model streams its reply; the think stage `emit`s each delta and
commits the whole reply. The caller reads ``handle.stream()``: partial items
and transition events, in order.

Run it with ``python examples/streaming.py [asyncio|trio]``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo import AgentState, AgentSystem, Machine, Partial, Patch, StateView, emit, stage
from arkhon_rheo import Lifecycle as L

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class ChatState(AgentState):
    lifecycle: L = L.THINKING
    question: str = "what is 6 times 7?"
    answer: str = ""


async def fake_model(question: str) -> AsyncIterator[str]:
    """Stands in for a streaming model client: a token at a time, as the network brings it."""
    for token in ["6 ", "times ", "7 ", "is ", "42."]:
        await anyio.sleep(0.001)  # the network
        yield token


@stage(reads={"question"}, writes={"answer"}, next=L.FINISHED)
async def think(view: StateView[ChatState]) -> Patch:
    reply = []
    async for token in fake_model(view.question):
        emit(token)  # never waits: a slow reader loses deltas, not time
        reply.append(token)
    return Patch(answer="".join(reply))  # the full reply is what gets committed


machine = Machine(
    name="streaming",
    state_type=ChatState,
    initial=L.THINKING,
    transitions={L.THINKING: {L.FINISHED}},
    stages={L.THINKING: think},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
    invariants={L.FINISHED: [lambda s: bool(s.answer)]},
)


async def main() -> None:
    async with AgentSystem(path=None) as system:
        handle = await system.start(machine, ChatState())
        async with handle.stream() as stream:
            async for item in stream:  # ends when the session does
                if isinstance(item, Partial):
                    print(f"  delta {item.position} (attempt {item.attempt}): {item.data!r}")
                else:
                    print(
                        f"event #{item.seq} {item.stage}: {item.from_state.name} -> "
                        f"{item.to_state.name}"
                    )
        result = await handle.result()
    print(f"committed answer: {result.state.answer!r}")


anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
