"""The agent of the once-only effects crash test (`tests/react/test_effects_crash.py`).

The test runs it under `arkhon_rheo.testing.crash_loop`, whose child processes
import ``tests.support.effects_child:machine`` and ``...:initial``. It is a
ReAct agent over a model that needs no script (`TurnModel`: each session asks
for `CALLS` tool calls, one per turn, then answers), with two tools that do
something to the world that must not happen twice: ``send`` (its effect:
``ask`` a human about a call that may have happened) and ``charge`` (``fail``
the session instead). Each appends one line to the world file (named by the
``ARKHON_EFFECTS_WORLD`` environment variable) in one ``write``: the call's
idempotency key, its tool and its session. Both pause for short random times
(drawn from `random`, which each child seeds) before and after, so a kill lands
before a call, in it, between it and its stored answer, or after.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo.protocols import (
    AssistantMessage,
    ModelReply,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.tools import ToolContext, tool

if TYPE_CHECKING:
    from collections.abc import Sequence

    from arkhon_rheo import Machine
    from arkhon_rheo.protocols import Message, ToolSpec

#: The environment variable naming the world file.
WORLD = "ARKHON_EFFECTS_WORLD"
#: Tool calls each session makes, one per turn, alternating ``send`` and ``charge``.
CALLS = 4
#: The pauses a tool call takes before and after its effect (seconds).
PAUSES = (0.0, 0.0, 0.0005, 0.001, 0.002, 0.004)


class TurnModel:
    """A model client that needs no script: the conversation says what comes next.

    With fewer than `CALLS` tool results in the conversation, it asks for the
    next call (``send`` for an even one, ``charge`` for an odd one, named by its
    number); then it answers. The same conversation always gets the same reply,
    so a turn asked again after a crash is the same turn.
    """

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        """The next call of the session, or its answer."""
        await anyio.sleep(random.choice(PAUSES))
        task = next(str(m.content) for m in messages if isinstance(m, UserMessage))
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done < CALLS:
            name = "send" if done % 2 == 0 else "charge"
            call = ToolCall(id=f"call-{done}", name=name, arguments=f'{{"what": "{task}/{done}"}}')
            message = AssistantMessage(content=None, tool_calls=(call,))
            return ModelReply(message=message, finish_reason="tool_calls", usage=Usage(), model="t")
        message = AssistantMessage(content=f"{task}: done")
        return ModelReply(message=message, finish_reason="stop", usage=Usage(), model="t")


def _world() -> Path:
    return Path(os.environ[WORLD])


async def _effect(name: str, what: str, ctx: ToolContext) -> str:
    await anyio.sleep(random.choice(PAUSES))
    line = f"{ctx.idempotency_key} {name} {ctx.session_id} {what}\n".encode()
    fd = os.open(_world(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write: a kill leaves the whole line or none of it
    finally:
        os.close(fd)
    await anyio.sleep(random.choice(PAUSES))
    return f"{name}: {what}"


@tool(effect="ask")
async def send(what: str, ctx: ToolContext) -> str:
    """Send a message (a human decides about one that may have gone)."""
    return await _effect("send", what, ctx)


@tool(effect="fail")
async def charge(what: str, ctx: ToolContext) -> str:
    """Charge a card (the session fails rather than charge twice)."""
    return await _effect("charge", what, ctx)


def machine() -> Machine[ReactState]:
    """The agent the children run."""
    return react_agent(TurnModel(), [send, charge], name="effects", system_prompt=None)


def initial() -> ReactState:
    """A fresh session's state (its task names it well enough: the model reads it)."""
    return ReactState(task=f"task-{random.getrandbits(32):08x}")


def effects_made(world: Path) -> Counter[str]:
    """How many times each idempotency key's effect happened, by the world file."""
    if not world.exists():
        return Counter()
    return Counter(line.split()[0] for line in world.read_text().splitlines() if line)
