"""A real-model ReAct agent, named by ``MODULE:ATTR``, whose client nobody opens by hand.

``agent`` is ``react_agent(OpenAIChatClient(...), tools=[add])``, made when the
module is imported, exactly as a user's module would make it; ``gated_agent``
makes one that pauses before each tool call, ``broken_agent`` one with a
resource that cannot open. The client's base URL comes from
the ``ARKHON_TEST_CHAT_URL`` environment variable (a loopback server the test
runs, `tests.support.chat_server`), read when a client is made; with
``ARKHON_TEST_PROVIDER=anthropic`` the client is an `AnthropicClient` of that
server's root (`tests.support.anthropic_server`'s replies). Nothing here
enters the client: whoever drives the agent (the CLI, the inspector,
`AgentSystem.recover`) must open it.

The tool takes a `ToolContext` and answers with what it saw of it, so a test
can check what reached it across processes.
"""

from __future__ import annotations

import json
import os
from typing import Any

from arkhon_rheo import Gate, Machine
from arkhon_rheo.models import AnthropicClient, OpenAIChatClient
from arkhon_rheo.react import Checks, ReactState, react_agent
from arkhon_rheo.tools import ToolContext, tool

#: The environment variable holding the chat server's base URL.
URL_VARIABLE = "ARKHON_TEST_CHAT_URL"
#: The environment variable naming the provider (``anthropic``; else OpenAI-compatible).
PROVIDER_VARIABLE = "ARKHON_TEST_PROVIDER"
#: The API key the client sends.
KEY = "real-agent-test-key"


@tool
async def add(a: int, b: int, ctx: ToolContext) -> str:
    """Add two integers."""
    model: Any = ctx.resources["model"]
    return json.dumps(
        {
            "sum": a + b,
            "session": ctx.session_id,
            "step": ctx.step,
            "call": ctx.call_id,
            "model_open": model.is_open,
        }
    )


def client() -> OpenAIChatClient | AnthropicClient:
    """A client of the test's chat server (a port nothing listens on without one)."""
    if os.environ.get(PROVIDER_VARIABLE) == "anthropic":
        root = os.environ.get(URL_VARIABLE, "http://127.0.0.1:9")
        return AnthropicClient("claude-test", base_url=root, api_key=KEY, read_timeout=30)
    base_url = os.environ.get(URL_VARIABLE, "http://127.0.0.1:9/v1")
    return OpenAIChatClient("test-model", base_url=base_url, api_key=KEY, read_timeout=30)


def make_agent(*, gated: bool = False) -> Machine[ReactState]:
    """A fresh agent with a fresh client (one that pauses before each tool call if ``gated``)."""
    return react_agent(
        client(),
        [add],
        name="real-agent-gated" if gated else "real-agent",
        checks=Checks(gates=[Gate.before("act")] if gated else ()),
    )


class Unreachable:
    """A resource that cannot open: a database nobody serves."""

    async def __aenter__(self) -> Unreachable:
        raise ConnectionRefusedError("the database at 127.0.0.1:9 refused the connection")

    async def __aexit__(self, *exc: object) -> None:
        raise AssertionError("never opened, so never closed")


def broken_agent() -> Machine[ReactState]:
    """``MODULE:ATTR`` factory: the agent with one more resource, which cannot open."""
    return react_agent(client(), [add], name="real-agent", resources={"db": Unreachable()})


def gated_agent() -> Machine[ReactState]:
    """``MODULE:ATTR`` factory: the agent that pauses at a gate before each tool call."""
    return make_agent(gated=True)


def conversational_agent() -> Machine[ReactState]:
    """``MODULE:ATTR`` factory: the agent as a conversation (it waits for the next message)."""
    return react_agent(client(), [add], name="real-chat", conversational=True)


#: The agent, as a user's module exposes one.
agent = make_agent()
