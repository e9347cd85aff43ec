"""No key given to AnthropicClient reaches an error, its chain, a record, the store or a log.

As `test_models_secrets` does for the OpenAI client: each test gives the
library a key of its own, against a real loopback server that echoes the
``x-api-key`` it receives in error bodies, replies and stream events.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import structlog.testing

from arkhon_rheo import (
    AgentSystem,
    ConfigurationError,
    Fatal,
    Recoverable,
    Transient,
    record_call,
    record_stream,
)
from arkhon_rheo.models import AnthropicClient
from arkhon_rheo.protocols import ModelReply, ReplyDelta
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.supervision import Backoff, RestartIntensity
from arkhon_rheo.tools import tool
from tests.support.anthropic_server import error, message_body, stream_events
from tests.support.chat_server import Canned, Received, open_chat_server
from tests.support.model_clients import (
    HELLO,
    exception_texts,
    failure_of,
    leaks,
    long_page,
    run_stored,
)

pytestmark = pytest.mark.anyio


def echoed(request: Received) -> str:
    """The key a request carried (what an echoing server sends back)."""
    return request.headers["x-api-key"]


@tool
async def use(key: str) -> str:
    """Use a key."""
    return f"used {key}"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 429, 500, 529])
async def test_a_key_echoed_in_an_error_body_is_in_no_error(status: int) -> None:
    key = f"sk-ant-echoed-in-a-{status}-0123456789"
    with structlog.testing.capture_logs() as logs:
        async with (
            open_chat_server() as server,
            AnthropicClient("m", api_key=key, base_url=server.root) as client,
        ):
            for _ in range(2):
                server.add(
                    Canned(
                        status=status,
                        render=lambda r: error(status, f"bad key {echoed(r)}").body,
                    )
                )
            failures = [
                await failure_of(lambda: client.complete(HELLO)),
                await failure_of(lambda: anext(aiter(client.stream(HELLO)))),
            ]
    for failure in failures:
        assert isinstance(failure, Transient if status in (429, 500, 529) else Fatal)
        assert "bad key [REDACTED]" in str(failure)
        assert not leaks(key, *exception_texts(failure), repr(logs))


@pytest.mark.parametrize(("status", "pad"), [(200, 50), (529, 470), (400, 470)])
async def test_a_key_echoed_in_a_long_non_json_body_leaves_no_piece(status: int, pad: int) -> None:
    key = f"sk-ant-in-a-long-body-{status}-0123456789"
    async with (
        open_chat_server() as server,
        AnthropicClient("m", api_key=key, base_url=server.root) as client,
    ):
        render = lambda request: long_page(echoed(request), pad)  # noqa: E731
        server.add(Canned(status=status, render=render), Canned(status=status, render=render))
        failures = [
            await failure_of(lambda: client.complete(HELLO)),
            await failure_of(lambda: anext(aiter(client.stream(HELLO)))),
        ]
    for failure in failures:
        assert isinstance(failure, Transient | Fatal | Recoverable), repr(failure)
        assert not leaks(key, *exception_texts(failure))


async def test_a_key_in_a_stream_event_or_error_event_leaves_no_piece() -> None:
    key = "sk-ant-in-a-stream-event-0123456789"
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": key}}
    async with (
        open_chat_server() as server,
        AnthropicClient("m", api_key=key, base_url=server.root) as client,
    ):
        server.add(
            Canned(events=[long_page(key, 50)], done_marker=False),
            Canned(events=[("error", overloaded)], done_marker=False),
        )
        failures = [await failure_of(lambda: anext(aiter(client.stream(HELLO)))) for _ in "ab"]
    assert [type(f) for f in failures] == [Recoverable, Transient]
    for failure in failures:
        assert not leaks(key, *exception_texts(failure))


async def test_a_reply_quoting_the_key_is_scrubbed_before_it_is_recorded() -> None:
    key = "sk-ant-quoted-by-the-model-0123456789"

    def quoting(request: Received) -> Any:
        said = f"Your key is {echoed(request)}."
        return message_body(said, tool_uses=[("tu_1", "use", {"key": echoed(request)})])

    async with (
        open_chat_server() as server,
        AnthropicClient("m", api_key=key, base_url=server.root) as client,
    ):
        server.add(Canned(render=quoting))
        pieces = ["Your key is sk-ant-quo", "ted-by-the-mo", "del-0123456789 and ", "more"]
        arguments = ['{"key": "sk-ant-quoted-by', '-the-model-0123456789"}']
        events = stream_events(*pieces, tool_uses=[("tu_2", "use", arguments)])
        server.add(Canned(events=events, done_marker=False))
        got: list[Any] = []

        async def ask() -> str:
            reply = await record_call(
                "model",
                client.request_body(HELLO),
                lambda: client.complete(HELLO),
                returns=ModelReply,
            )
            got.append(reply)
            got.extend(
                [
                    chunk
                    async for chunk in record_stream(
                        "model",
                        client.request_body(HELLO, stream=True),
                        lambda: client.stream(HELLO),
                        returns=ReplyDelta | ModelReply,
                    )
                ]
            )
            return f"{reply.text} {reply.tool_calls[0].arguments}"

        result, stored = await run_stored(ask)
    assert result.ok, result.failure
    assert result.state.answer == 'Your key is [REDACTED]. {"key": "[REDACTED]"}'
    assert got[-1].text == "Your key is [REDACTED] and more"
    assert got[-1].tool_calls[0].arguments == '{"key": "[REDACTED]"}'
    assert "".join(c.text for c in got if isinstance(c, ReplyDelta)) == got[-1].text
    assert not leaks(key, stored, repr(got))


async def test_an_agents_store_and_logs_hold_no_key_after_echoed_failures() -> None:
    key = "sk-ant-agent-store-0123456789"
    with structlog.testing.capture_logs() as logs:
        async with open_chat_server() as server:
            server.add(
                Canned(status=529, render=lambda r: error(529, f"busy {echoed(r)}").body),
                Canned(render=lambda r: long_page(echoed(r), 50)),
                Canned(render=lambda r: message_body(f"done, {echoed(r)}")),
            )
            client = AnthropicClient("m", api_key=key, base_url=server.root)
            agent = react_agent(client, [use])
            options: dict[str, Any] = {
                "backoff": Backoff(base=0, cap=0),
                "restart_intensity": RestartIntensity(max_restarts=3, within=60),
            }
            async with AgentSystem(**options) as system:
                result = await system.run(agent, ReactState(task="go"), session_id="s")
                history = await system.stored(agent, "s").history()
    assert result.ok, result.failure
    assert result.state.answer == "done, [REDACTED]"
    stored = repr(history) + repr(result) + json.dumps(result.state.model_dump(mode="json"))
    assert not leaks(key, stored, repr(logs))


def test_a_key_no_header_can_carry_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = "sk-ant-inner\nbreak-0123456789"
    with pytest.raises(ConfigurationError, match="the api_key argument") as caught:
        AnthropicClient("m", api_key=bad)
    monkeypatch.setenv("ANTHROPIC_API_KEY", bad)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY") as from_env:
        AnthropicClient("m")
    for exc in (caught.value, from_env.value):
        assert not leaks(bad, *exception_texts(exc), size=6)


async def test_a_key_in_the_http_clients_headers_is_scrubbed() -> None:
    key = "sk-ant-in-the-http-client-0123456789"
    async with (
        open_chat_server() as server,
        httpx.AsyncClient(headers={"X-Api-Key": key, "anthropic-beta": "x"}) as http,
    ):
        client = AnthropicClient("m", base_url=server.root, http_client=http)
        server.add(error(401, f"invalid x-api-key {key}"), Canned(body=message_body(key)))
        failure = await failure_of(lambda: client.complete(HELLO))
        reply = await client.complete(HELLO)
    assert isinstance(failure, Fatal)
    assert server.requests[0].headers["x-api-key"] == key
    assert server.requests[0].headers["anthropic-beta"] == "x"
    assert reply.text == "[REDACTED]"
    assert not leaks(key, *exception_texts(failure), repr(client))
