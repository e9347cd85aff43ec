"""A conversation that outlives its process, and a reminder that fires after a restart.

The agent is a conversational ReAct agent: after each answer it parks in the
store (status ``waiting``, no memory held) until the user's next message.
Offline it runs on a scripted model that answers by its place in the
conversation, so any process can go on with it; with ``OPENAI_BASE_URL`` set
(and ``OPENAI_API_KEY``, ``ARKHON_MODEL`` as your server needs) it talks to
that OpenAI-compatible server through one module-level client, opened by
each system that drives the session (the two systems below share it, one
after the other).

From the command line, the same agent::

    arkhon-rheo run examples.conversation:agent --text "hi" --session-id chat
    arkhon-rheo send chat --machine examples.conversation:agent --text "what is 6 * 7?"
    arkhon-rheo sessions --status waiting

The reminder machine schedules a message to itself two hours ahead; the
system is closed, a new one opens the same file later (on a virtual clock
here, moved past the two hours), and ``recover`` delivers the reminder.

Run it with ``python examples/conversation.py [asyncio|trio]``.
"""

from __future__ import annotations

import enum
import os
import sys
import tempfile
from pathlib import Path

import anyio
from pydantic import BaseModel

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, stage
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import ModelClient, Receive, ToolCall, schedule
from arkhon_rheo.react import Conversation, react_agent
from arkhon_rheo.testing import ScriptedModel, VirtualClock
from arkhon_rheo.tools import tool


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _model() -> ModelClient:
    if os.environ.get("OPENAI_BASE_URL"):
        return OpenAIChatClient()  # opened by each system that drives the session
    return ScriptedModel(
        [
            "Hello! Ask me anything.",
            ToolCall(id="m1", name="multiply", arguments='{"a": 6, "b": 7}'),
            "6 * 7 = 42.",
            "You're welcome. Goodbye!",
        ]
    )


#: The conversational agent: ``examples.conversation:agent`` for the command line.
agent = react_agent(_model(), [multiply], conversational=True, name="conversation")


# -- a reminder that survives a restart -------------------------------------------


class Step(enum.Enum):
    PLAN = "plan"
    WAIT = "wait"
    DONE = "done"
    FAILED = "failed"


class Remind(BaseModel):
    text: str


class Reminders(AgentState):
    lifecycle: Step = Step.PLAN
    note: str = ""
    fired: str | None = None


@stage(reads={"note"}, writes=(), next=Step.WAIT)
async def plan(view: StateView[Reminders]) -> Patch:
    schedule(Remind(text=view.note), after=2 * 3600)  # stored with this step's commit
    return Patch()


class Wait(Receive[Reminders], reads=(), writes={"fired"}, accepts=(Remind,)):
    async def apply(self, view: StateView[Reminders], message: Remind) -> Patch:
        return Patch(fired=message.text)

    def next(self, state: Reminders) -> Step:
        return Step.DONE


reminders = Machine(
    name="reminders",
    state_type=Reminders,
    initial=Step.PLAN,
    transitions={Step.PLAN: {Step.WAIT}, Step.WAIT: {Step.DONE}},
    stages={Step.PLAN: plan, Step.WAIT: Wait},
    terminal={Step.DONE, Step.FAILED},
    failed=Step.FAILED,
)


async def converse(path: Path) -> None:
    async with AgentSystem(path=path) as system:
        chat = Conversation(system, agent, session_id="chat")
        print(f"user: hi\nagent: {await chat.start('hi')}")
    # A new system (as a new process would): the conversation goes on from the store.
    async with AgentSystem(path=path) as system:
        chat = Conversation(system, agent, session_id="chat")
        for text in ("what is 6 * 7?", "thanks!"):
            print(f"user: {text}\nagent: {await chat.say(text)}")
        await chat.close()
        record = await system.stored(agent, "chat").record()
        turns = sum(
            1
            for e in await system.stored(agent, "chat").history()
            if e.info and "message" in e.info
        )
        print(f"conversation: {record.status}, {turns} messages applied, {record.last_seq} events")
        report = await system.stored(agent, "chat").replay(reexecute=True)
        print(f"replay: {'ok' if report.ok else report.divergence}")


async def remind(path: Path) -> None:
    clock = VirtualClock()
    async with AgentSystem(path=path, clock=clock) as system:
        result = await system.run(reminders, Reminders(note="call the dentist"), session_id="r1")
        record = await system.stored(reminders, "r1").record()
        due = (record.wake_at or 0.0) - clock.now()
        print(f"reminder: {result.exit_reason.value}, due in {due:.0f} s")
    clock.advance(2 * 3600 + 1)  # the process is gone while the timer falls due
    async with AgentSystem(path=path, clock=clock) as system:
        (woken,) = await system.recover(reminders)
        result = await woken.result()
        print(f"after the restart: {result.exit_reason.value}, fired: {result.state.fired}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        await converse(Path(directory) / "chat.db")
        await remind(Path(directory) / "reminders.db")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
