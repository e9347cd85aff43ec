"""Typed answers reach the model: each provider's structured output, field by field.

`react_agent(answer_type=T)` passes T's schema (a `ResponseSchema`) to the
clients: OpenAI's ``response_format`` of type ``json_schema`` (``strict``
where the schema allows it), JSON mode or instructions for servers without
it; Anthropic's forced answer tool. The loopback server refuses what the real
APIs refuse (JSON mode without "json" in the messages, a malformed
``json_schema``, a forced tool no tool defines), so every request here is one
the real API would take.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import AgentSystem, ConfigurationError
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import Message, ResponseSchema, SystemMessage, ToolSpec
from arkhon_rheo.react import DEFAULT_TYPED_PROMPT, ReactState, react_agent
from arkhon_rheo.testing import ScriptedModel
from tests.support.anthropic_server import message, streamed
from tests.support.chat_server import Canned, open_chat_server
from tests.support.model_clients import HELLO, anthropic_client, openai_client

pytestmark = pytest.mark.anyio


class City(BaseModel):
    name: str
    population: int


class StrictCity(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    population: int


CITY = ResponseSchema(name="City", json_schema=City.model_json_schema())
STRICT = ResponseSchema(name="StrictCity", json_schema=StrictCity.model_json_schema())
PARIS = '{"name": "Paris", "population": 2100000}'
ADD = ToolSpec(name="add", parameters={"type": "object", "properties": {"a": {"type": "integer"}}})


async def test_openai_gets_the_schema_as_response_format_strict_only_where_allowed() -> None:
    async with open_chat_server() as server, openai_client(server) as client:
        server.add(Canned.completion(PARIS), Canned.completion(PARIS))
        loose = await client.complete(HELLO, json_mode=True, schema=CITY)
        strict = await client.complete(HELLO, json_mode=True, schema=STRICT)
    assert loose.text == strict.text == PARIS
    first, second = (received.json for received in server.requests)
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "City", "schema": City.model_json_schema(), "strict": False},
    }
    assert first["messages"] == [{"role": "user", "content": "hello"}]
    assert second["response_format"]["json_schema"]["strict"] is True
    assert second["response_format"]["json_schema"]["name"] == "StrictCity"


async def test_openai_json_object_mode_names_json_and_the_schema() -> None:
    async with (
        open_chat_server() as server,
        openai_client(server, structured="json_object") as client,
    ):
        server.add(Canned.completion(PARIS))
        await client.complete([SystemMessage(content="be brief"), *HELLO], schema=CITY)
    body = server.requests[0].json
    assert body["response_format"] == {"type": "json_object"}
    system, instruction, user = body["messages"]
    assert system == {"role": "system", "content": "be brief"}
    assert instruction["role"] == "system"
    assert "JSON" in instruction["content"]
    assert (
        json.dumps(CITY.json_schema, sort_keys=True, separators=(",", ":"))
        in (instruction["content"])
    )
    assert user == {"role": "user", "content": "hello"}


async def test_json_mode_alone_says_json_once() -> None:
    said: list[Message] = [SystemMessage(content="Reply in JSON."), *HELLO]
    async with open_chat_server() as server, openai_client(server) as client:
        server.add(Canned.completion('{"a": 1}'), Canned.completion('{"a": 1}'))
        await client.complete(HELLO, json_mode=True)
        await client.complete(said, json_mode=True)
    first, second = (received.json for received in server.requests)
    assert first["response_format"] == second["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "JSON" in first["messages"][0]["content"]
    assert len(second["messages"]) == 2  # it says JSON already: nothing added


async def test_instructions_mode_sends_no_response_format() -> None:
    async with (
        open_chat_server() as server,
        openai_client(server, structured="instructions") as client,
    ):
        server.add(Canned.completion(PARIS))
        await client.complete(HELLO, json_mode=True, schema=CITY)
    body = server.requests[0].json
    assert "response_format" not in body
    assert body["messages"][0]["role"] == "system"
    assert '"population"' in body["messages"][0]["content"]


async def test_a_schema_that_is_no_object_goes_as_instructions() -> None:
    numbers = ResponseSchema(
        name="list", json_schema={"type": "array", "items": {"type": "integer"}}
    )
    async with open_chat_server() as server, openai_client(server) as client:
        server.add(Canned.completion("[1, 2]"))
        await client.complete(HELLO, json_mode=True, schema=numbers)
    body = server.requests[0].json
    assert "response_format" not in body
    assert '"array"' in body["messages"][0]["content"]


def test_an_unknown_structured_mode_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="structured"):
        OpenAIChatClient("m", api_key="k", structured="xml")  # type: ignore[arg-type]


async def test_the_loopback_server_refuses_what_the_real_apis_refuse() -> None:
    async with open_chat_server() as server, httpx.AsyncClient() as http:
        chat = f"{server.url}/chat/completions"
        hello = [{"role": "user", "content": "hello"}]
        no_json = await http.post(
            chat, json={"messages": hello, "response_format": {"type": "json_object"}}
        )
        bad_schema = await http.post(
            chat,
            json={
                "messages": hello,
                "response_format": {"type": "json_schema", "json_schema": {"name": "a b"}},
            },
        )
        not_strict = await http.post(
            chat,
            json={
                "messages": hello,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "City", "schema": CITY.json_schema, "strict": True},
                },
            },
        )
        forced: dict[str, Any] = {"messages": hello, "tool_choice": {"type": "tool", "name": "x"}}
        no_tool = await http.post(f"{server.root}/v1/messages", json=forced)
    assert [r.status_code for r in (no_json, bad_schema, not_strict, no_tool)] == [400] * 4
    assert "json" in no_json.json()["error"]["message"]
    assert "additionalProperties" in not_strict.json()["error"]["message"]
    assert no_tool.json()["error"]["type"] == "invalid_request_error"


async def test_anthropic_forces_the_answer_tool_and_takes_its_input_as_the_answer() -> None:
    async with open_chat_server() as server, anthropic_client(server) as client:
        server.add(message(tool_uses=[("tu_1", "City", {"name": "Paris", "population": 2})]))
        reply = await client.complete(HELLO, json_mode=True, schema=CITY)
    assert json.loads(reply.text or "") == {"name": "Paris", "population": 2}
    assert (reply.tool_calls, reply.finish_reason) == ((), "stop")
    body = server.requests[0].json
    assert body["tools"] == [
        {"name": "City", "description": "Give the final answer.", "input_schema": CITY.json_schema}
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "City"}
    assert "City tool" in body["system"]


async def test_anthropic_with_tools_must_call_one_of_them_or_the_answer() -> None:
    async with open_chat_server() as server, anthropic_client(server) as client:
        server.add(
            message(tool_uses=[("tu_1", "add", {"a": 1}), ("tu_2", "City", {"name": "x"})]),
            streamed(tool_uses=[("tu_3", "City", ['{"name": "Par', 'is", "population": 2}'])]),
        )
        acting = await client.complete(HELLO, tools=[ADD], schema=CITY)
        chunks = [chunk async for chunk in client.stream(HELLO, tools=[ADD], schema=CITY)]
    assert [call.name for call in acting.tool_calls] == ["add"]  # the answer waits for them
    assert json.loads(chunks[-1].text or "") == {"name": "Paris", "population": 2}
    body = server.requests[0].json
    assert [tool["name"] for tool in body["tools"]] == ["add", "City"]
    assert body["tool_choice"] == {"type": "any"}


async def test_a_typed_agent_gets_a_typed_city_on_openai() -> None:
    async with open_chat_server() as server:
        server.add(Canned.completion(PARIS))
        agent = react_agent(openai_client(server), answer_type=City)
        async with AgentSystem(path=None) as system:
            result = await system.run(agent, ReactState(task="France's biggest city?"))
    assert result.ok, result.failure
    assert result.state.output_as(City) == City(name="Paris", population=2_100_000)
    body = server.requests[0].json
    assert body["messages"][0] == {"role": "system", "content": DEFAULT_TYPED_PROMPT}
    assert "plain text" not in body["messages"][0]["content"]
    assert body["response_format"]["json_schema"]["schema"] == City.model_json_schema()


async def test_a_typed_agent_gets_a_typed_city_on_anthropic() -> None:
    async with open_chat_server() as server:
        server.add(message(tool_uses=[("tu_1", "City", {"name": "Paris", "population": 7})]))
        agent = react_agent(anthropic_client(server), answer_type=City)
        async with AgentSystem(path=None) as system:
            result = await system.run(agent, ReactState(task="France's biggest city?"))
    assert result.ok, result.failure
    assert result.state.output_as(City) == City(name="Paris", population=7)
    body = server.requests[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "City"}
    assert body["system"].startswith(DEFAULT_TYPED_PROMPT)


async def test_a_client_without_schema_gets_it_in_the_prompt() -> None:
    class Plain:
        def __init__(self) -> None:
            self.inner = ScriptedModel([PARIS])

        async def complete(self, messages: Any, *, tools: Any = (), json_mode: bool = False) -> Any:
            return await self.inner.complete(messages, tools=tools, json_mode=json_mode)

    plain, scripted = Plain(), ScriptedModel([PARIS])
    for model in (plain, scripted):
        async with AgentSystem(path=None) as system:
            result = await system.run(react_agent(model, answer_type=City), ReactState(task="?"))
        assert result.state.output_as(City) == City(name="Paris", population=2_100_000)
    (asked,) = plain.inner.requests
    assert isinstance(asked.messages[0], SystemMessage)
    assert '"population"' in asked.messages[0].content
    (told,) = scripted.requests
    assert told.schema == CITY
    assert told.messages[0] == SystemMessage(content=DEFAULT_TYPED_PROMPT)
