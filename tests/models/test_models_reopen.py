"""One model client shared by agent systems: one after another, at once, in two event loops.

A module-level ``react_agent(OpenAIChatClient())`` is opened by every system
that runs it: the client counts its opens (per event loop), makes its
``httpx.AsyncClient`` on the first and closes it on the last, so a second
system, or one running beside the first, finds it open (issue 39). Each test
runs for OpenAI's client and Anthropic's, against the loopback server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from arkhon_rheo import AgentSystem, Fatal
from arkhon_rheo.models import AnthropicClient, ClientState, OpenAIChatClient, governed
from arkhon_rheo.react import ReactState, react_agent
from tests.support import anthropic_server
from tests.support.chat_server import Canned, open_chat_server
from tests.support.model_clients import HELLO, anthropic_client, openai_client

if TYPE_CHECKING:
    from collections.abc import Callable

    from arkhon_rheo import Machine
    from tests.support.chat_server import ChatServer, Received

    Client = OpenAIChatClient | AnthropicClient

pytestmark = pytest.mark.anyio

#: Each provider: how its client is made on a server, and a canned answer in its format.
PROVIDERS: dict[str, tuple[Callable[[ChatServer], Client], Callable[[str], Canned]]] = {
    "openai": (openai_client, Canned.completion),
    "anthropic": (anthropic_client, anthropic_server.message),
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    """The provider whose client the test shares."""
    return str(request.param)


class Held:
    """A canned answer the server holds until `release` is set; `arrived` is set on its request."""

    def __init__(self, canned: Canned) -> None:
        self.arrived, self.release = anyio.Event(), anyio.Event()
        body = canned.body

        def render(_: Received) -> Any:
            self.arrived.set()
            return body

        canned.hold, canned.render = self.release, render
        self.canned = canned


async def answer(system: AgentSystem, agent: Machine[ReactState], task: str) -> str | None:
    """The answer of one session of ``agent`` on ``system``."""
    result = await system.run(agent, ReactState(task=task))
    assert result.ok, result.failure
    return result.state.answer


async def test_two_systems_one_after_another_open_the_same_client(provider: str) -> None:
    make, reply = PROVIDERS[provider]
    async with open_chat_server() as server:
        server.add(reply("one"), reply("two"), reply("three"))
        client = make(server)
        agent = react_agent(client)  # as a module would hold it
        for task, expected in (("a", "one"), ("b", "two"), ("c", "three")):
            async with AgentSystem(path=None) as system:
                assert await answer(system, agent, task) == expected
                assert client.is_open
            assert client.state is ClientState.CLOSED  # its httpx client closed with the system


async def test_two_systems_at_once_share_the_client_until_the_last_stops(provider: str) -> None:
    make, reply = PROVIDERS[provider]
    async with open_chat_server() as server:
        held = Held(reply("first"))
        server.add(held.canned, reply("second"))
        client = make(server)
        agent = react_agent(client)
        async with AgentSystem(path=None) as first:
            waiting = await first.start(agent, ReactState(task="a"))
            await held.arrived.wait()  # the first system's call is in flight, held
            async with AgentSystem(path=None) as second:
                assert await answer(second, agent, "b") == "second"
            assert client.is_open  # the second system left it; the first still holds it
            held.release.set()
            result = await waiting.result()
            assert result.ok, result.failure
            assert result.state.answer == "first"
        assert client.state is ClientState.CLOSED


async def test_a_system_in_another_event_loop_opens_its_own_http_client(
    provider: str, anyio_backend: str
) -> None:
    make, reply = PROVIDERS[provider]
    other = "trio" if anyio_backend == "asyncio" else "asyncio"
    async with open_chat_server() as server:
        held = Held(reply("here"))
        server.add(held.canned, reply("there"))
        client = make(server)
        agent = react_agent(client)

        async def in_the_other_loop() -> str | None:
            with pytest.raises(Fatal, match="open in another event loop only"):
                await client.complete(HELLO)  # not entered in this loop
            async with AgentSystem(path=None) as system:
                return await answer(system, agent, "there")

        async with AgentSystem(path=None) as system:
            waiting = await system.start(agent, ReactState(task="here"))
            await held.arrived.wait()
            there = await anyio.to_thread.run_sync(
                lambda: anyio.run(in_the_other_loop, backend=other)
            )
            assert there == "there"
            assert client.is_open  # this loop's open is untouched by the other's close
            held.release.set()
            assert (await waiting.result()).state.answer == "here"
        assert client.state is ClientState.CLOSED


async def test_a_client_its_user_holds_open_stays_open_through_systems(provider: str) -> None:
    make, reply = PROVIDERS[provider]
    async with open_chat_server() as server:
        server.add(reply("one"), reply("two"))
        async with make(server) as client:
            agent = react_agent(governed(client))  # a wrapper counts as its client does
            async with AgentSystem(path=None) as system:
                assert await answer(system, agent, "a") == "one"
            assert client.is_open
            assert (await client.complete(HELLO)).message.content == "two"
        assert not client.is_open


def test_the_clients_count_their_opens() -> None:
    for client in (
        OpenAIChatClient("m", api_key="k", base_url="http://127.0.0.1:9/v1"),
        AnthropicClient("m", api_key="k", base_url="http://127.0.0.1:9"),
    ):
        assert client.counts_opens
        assert governed(client).counts_opens
        assert client.state is ClientState.UNOPENED
