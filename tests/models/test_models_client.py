"""OpenAIChatClient against a real loopback HTTP server: formats, streaming, failures."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anyio
import pytest

from arkhon_rheo import ConfigurationError, Fatal, Recoverable, Transient
from arkhon_rheo.models import ClientState, OpenAIChatClient, cost
from arkhon_rheo.models._failures import retry_after_seconds
from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelReply,
    ReplyDelta,
    StreamingModelClient,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
)
from tests.support.chat_server import Canned, open_chat_server, text_chunks
from tests.support.model_clients import HELLO, collect
from tests.support.model_clients import OPENAI_KEY as KEY
from tests.support.model_clients import openai_client as client_for

pytestmark = pytest.mark.anyio


async def test_a_plain_completion() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned.completion("Hi there", usage=(7, 2)))
        reply = await client.complete([SystemMessage(content="be brief"), *HELLO])
    assert isinstance(client, StreamingModelClient)
    assert reply == ModelReply(
        message=AssistantMessage(content="Hi there"),
        finish_reason="stop",
        usage=Usage(prompt_tokens=7, completion_tokens=2),
        model="test-model",
    )
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ],
    }
    assert client.state is ClientState.CLOSED


async def test_tool_specs_go_out_and_tool_calls_come_back() -> None:
    spec = ToolSpec(
        name="add",
        description="Adds two numbers.",
        parameters={"type": "object", "properties": {"a": {"type": "number"}}},
    )
    conversation: list[Message] = [
        *HELLO,
        AssistantMessage(tool_calls=(ToolCall(id="c0", name="add", arguments='{"a": 1}'),)),
        ToolMessage(tool_call_id="c0", name="add", content="1"),
    ]
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned.completion(tool_calls=[("c1", "add", '{"a": 2}'), ("c2", "add", "{}")]))
        reply = await client.complete(conversation, tools=[spec])
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall(id="c1", name="add", arguments='{"a": 2}'),
        ToolCall(id="c2", name="add", arguments="{}"),
    )
    body = server.requests[0].json
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Adds two numbers.",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
            },
        }
    ]
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "1"},
    ]


async def test_json_mode_asks_for_a_json_object() -> None:
    async with (
        open_chat_server() as server,
        client_for(server, options={"temperature": 0}) as client,
    ):
        server.add(Canned.completion('{"a": 1}'))
        reply = await client.complete(HELLO, json_mode=True)
    assert reply.text == '{"a": 1}'
    body = server.requests[0].json
    assert body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0


async def test_a_stream_yields_deltas_then_the_assembled_reply() -> None:
    events = [
        *text_chunks("Hel", "lo")[:2],
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "add", "arguments": ""}}
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "c2",
                                "function": {"name": "neg", "arguments": "{}"},
                            },
                            {"index": 0, "function": {"arguments": '{"a": '}},
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 4}, "model": "served"},
    ]
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=events))
        chunks = [chunk async for chunk in client.stream(HELLO)]
    assert chunks[:2] == [ReplyDelta(text="Hel", index=0), ReplyDelta(text="lo", index=1)]
    reply = chunks[-1]
    assert isinstance(reply, ModelReply)
    assert len(chunks) == 3
    assert reply.text == "Hello"
    assert reply.tool_calls == (
        ToolCall(id="c1", name="add", arguments='{"a": 1}'),
        ToolCall(id="c2", name="neg", arguments="{}"),
    )
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == Usage(prompt_tokens=11, completion_tokens=4)
    assert reply.model == "served"
    body = server.requests[0].json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_rate_limits_are_transient_and_carry_retry_after() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned.error(429, "slow down", **{"Retry-After": "7"}))
        with pytest.raises(Transient, match="rate limited") as caught:
            await client.complete(HELLO)
        assert caught.value.retry_after == 7.0
        assert "slow down" in str(caught.value)
        server.add(Canned.error(429, "slow down", **{"Retry-After": "7"}))
        with pytest.raises(Transient, match="rate limited"):
            _ = [chunk async for chunk in client.stream(HELLO)]


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds("2.5", now.timestamp()) == 2.5
    assert retry_after_seconds(later, now.timestamp()) == pytest.approx(30.0)
    assert retry_after_seconds(later, now.timestamp() + 60) == 0.0  # already past
    assert retry_after_seconds("soon", now.timestamp()) is None
    assert retry_after_seconds(None, now.timestamp()) is None


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_server_errors_are_transient(status: int) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned.error(status, "overloaded"))
        with pytest.raises(Transient, match=f"HTTP {status}: overloaded") as caught:
            await client.complete(HELLO)
    assert caught.value.retry_after is None


async def test_a_response_slower_than_the_read_timeout_is_transient() -> None:
    release = anyio.Event()
    async with open_chat_server() as server, client_for(server, read_timeout=0.05) as client:
        server.add(
            Canned.completion(
                "late",
            ),
        )
        server.queue[0].hold = release
        with pytest.raises(Transient, match="timed out"):
            await client.complete(HELLO)
        release.set()


async def test_a_refused_connection_is_transient() -> None:
    async with open_chat_server() as server:
        url = server.url  # the port is free again once the server is gone
    async with OpenAIChatClient("m", api_key=KEY, base_url=url) as client:
        with pytest.raises(Transient, match="could not be reached"):
            await client.complete(HELLO)


async def test_a_connection_dropped_mid_body_is_transient() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(body=Canned.completion("cut").body, drop_after=10))
        with pytest.raises(Transient, match="mid-exchange"):
            await client.complete(HELLO)
        server.add(Canned(events=text_chunks("par"), done_marker=False, drop_after=0))
        with pytest.raises(Transient):
            _ = [chunk async for chunk in client.stream(HELLO)]


async def test_a_stream_closed_before_its_end_is_transient() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=text_chunks("par")[:1], done_marker=False))
        with pytest.raises(Transient, match="before its end marker"):
            _ = [chunk async for chunk in client.stream(HELLO)]


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (401, "check OPENAI_API_KEY"),
        (403, "may use this model"),
        (404, "model 'test-model' at http://127.0.0.1:"),
        (400, "HTTP 400: messages must not be empty"),
        (422, "HTTP 422: messages must not be empty"),
    ],
)
async def test_client_errors_are_fatal_and_say_what_to_fix(status: int, says: str) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned.error(status, "messages must not be empty"))
        with pytest.raises(Fatal, match=says) as caught:
            await client.complete(HELLO)
    assert "messages must not be empty" in str(caught.value)
    if status == 404:
        assert "OPENAI_BASE_URL" in str(caught.value)
        assert "/v1/chat/completions" in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [b"<html>bad gateway</html>", json.dumps({"id": "x"}).encode(), b'{"choices": []}'],
    ids=["not-json", "no-choices", "empty-choices"],
)
async def test_a_body_that_is_not_a_reply_is_recoverable(body: bytes) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(body=body))
        with pytest.raises(Recoverable, match="not in the expected format"):
            await client.complete(HELLO)


async def test_garbage_in_a_stream_is_recoverable() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=["{not json"]))
        with pytest.raises(Recoverable, match="stream event"):
            _ = [chunk async for chunk in client.stream(HELLO)]


async def test_the_environment_configures_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_chat_server() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
        monkeypatch.setenv("OPENAI_API_KEY", "env-key-123456")
        monkeypatch.setenv("ARKHON_MODEL", "env-model")
        async with OpenAIChatClient() as client:
            server.add(Canned.completion("ok"))
            await client.complete(HELLO)
    (request,) = server.requests
    assert request.headers["authorization"] == "Bearer env-key-123456"
    assert request.json["model"] == "env-model"
    assert client.model == "env-model"


def test_defaults_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ARKHON_MODEL"):
        monkeypatch.delenv(name, raising=False)
    client = OpenAIChatClient()
    assert (client.model, client.base_url) == ("gpt-4o-mini", "https://api.openai.com/v1")
    assert "api_key=<none>" in repr(client)
    with pytest.raises(ConfigurationError, match="read_timeout"):
        OpenAIChatClient(read_timeout=0)


async def test_no_key_is_sent_when_none_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with open_chat_server() as server, OpenAIChatClient("m", base_url=server.url) as client:
        server.add(Canned.completion("ok"))
        await client.complete(HELLO)
    assert "authorization" not in server.requests[0].headers


async def test_a_client_is_used_inside_its_async_with_only() -> None:
    client = OpenAIChatClient("m", api_key=KEY, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(Fatal, match="unopened"):
        await client.complete(HELLO)
    async with client:
        pass
    with pytest.raises(Fatal, match="closed"):
        await client.complete(HELLO)
    async with client:  # entered again: open again
        assert client.is_open
    assert not client.is_open


async def test_a_shared_limiter_bounds_the_calls_in_flight() -> None:
    limiter = anyio.CapacityLimiter(1)
    release = anyio.Event()
    async with open_chat_server() as server, client_for(server, limiter=limiter) as client:
        server.add(Canned.completion("one"), Canned.completion("two"))
        server.queue[0].hold = release
        replies: list[str | None] = []

        async def ask() -> None:
            replies.append((await client.complete(HELLO)).text)

        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            group.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            assert len(server.requests) == 1  # the second waits for the limiter
            assert limiter.statistics().tasks_waiting == 1
            release.set()
    assert replies == ["one", "two"]


async def test_a_client_given_an_httpx_client_leaves_it_open() -> None:
    import httpx

    async with open_chat_server() as server, httpx.AsyncClient() as http:
        client = OpenAIChatClient("m", api_key=KEY, base_url=server.url, http_client=http)
        server.add(Canned.completion("a"), Canned.completion("b"))
        async with client:
            await client.complete(HELLO)
        assert not http.is_closed
        reply = await OpenAIChatClient("m", base_url=server.url, http_client=http).complete(HELLO)
    assert reply.text == "b"


# --- server-sent events through httpx-sse ----------------------------------------------------


def spread(data: dict[str, object], *fields: str) -> bytes:
    """One event with its JSON over several ``data:`` lines, after ``fields`` lines."""
    lines = json.dumps(data, indent=1).splitlines()
    return (
        "".join(f"{f}\n" for f in fields) + "".join(f"data: {x}\n" for x in lines) + "\n"
    ).encode()


async def test_multi_line_data_event_id_and_retry_fields_are_read() -> None:
    first, second, stop = text_chunks("Hel", "lo")
    raw = spread(second, "event: message", "id: 2")
    async with open_chat_server() as server, client_for(server) as client:
        server.add(
            Canned(
                events=[
                    b": keep-alive comment\n\n",
                    b"retry: 3000\n\n",  # a lone retry field: no event
                    spread(first, "retry: 1000"),
                    raw[:9],  # one event cut across two chunks of the body
                    raw[9:],
                    ("message", stop),
                ]
            )
        )
        chunks = [chunk async for chunk in client.stream(HELLO)]
    assert chunks[:2] == [ReplyDelta(text="Hel", index=0), ReplyDelta(text="lo", index=1)]
    final = chunks[-1]
    assert isinstance(final, ModelReply)
    assert (final.text, final.finish_reason) == ("Hello", "stop")
    assert server.requests[0].headers["accept"] == "text/event-stream"


@pytest.mark.parametrize(
    ("kind", "raised"), [("server_error", Transient), ("invalid_request_error", Fatal)]
)
async def test_an_error_event_mid_stream_is_classified(kind: str, raised: type[Exception]) -> None:
    error = {"error": {"type": kind, "message": "the model crashed"}}
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=[*text_chunks("par")[:1], ("error", error)], done_marker=False))
        seen: list[object] = []
        with pytest.raises(raised, match=f"{kind}: the model crashed") as caught:
            await collect(client.stream(HELLO), seen)
    assert type(caught.value) is raised
    assert seen == [ReplyDelta(text="par", index=0)]


async def test_a_reply_that_is_not_an_event_stream_is_recoverable() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned.completion("a JSON body: the server ignored stream=true"))
        with pytest.raises(Recoverable, match="application/json, not text/event-stream"):
            _ = [chunk async for chunk in client.stream(HELLO)]


async def test_openais_cached_prompt_tokens_are_counted() -> None:
    body = Canned.completion("ok").body
    body["usage"] = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(body=body))
        reply = await client.complete(HELLO)
    assert reply.usage == Usage(prompt_tokens=2006, completion_tokens=300, cache_read_tokens=1920)
    # gpt-4o-mini: input 0.15, cached input 0.075, output 0.60 per million.
    expected = (86 * 0.15 + 1920 * 0.075 + 300 * 0.60) / 1e6
    assert cost(reply.usage, "gpt-4o-mini") == pytest.approx(expected)
