"""The smallest supervised session: one stage, one invariant, one commit.

Run it with ``python examples/minimal_session.py [asyncio|trio]``.
"""

from __future__ import annotations

import sys

import anyio

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L


class MyState(AgentState):
    lifecycle: L = L.INITIALIZED
    user_input: str = ""
    answer: str = ""


@stage(reads={"user_input"}, writes={"answer"}, next=L.FINISHED)
async def shout(view: StateView[MyState]) -> Patch:
    return Patch(answer=view.user_input.upper())  # writing anything else is refused


machine = Machine(
    state_type=MyState,
    initial=L.INITIALIZED,
    transitions={L.INITIALIZED: {L.FINISHED}},
    stages={L.INITIALIZED: shout},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
    invariants={L.FINISHED: [lambda s: bool(s.answer)]},
)


async def main() -> None:
    async with AgentSystem() as system:
        result = await system.run(machine, MyState(user_input="hello"))
    print(result.exit_reason.value, result.state.answer)


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
