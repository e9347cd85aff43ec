"""AnthropicClient against a real loopback server speaking Anthropic's Messages format."""

from __future__ import annotations

import json

import pytest

from arkhon_rheo import ConfigurationError, Fatal, Recoverable, Transient
from arkhon_rheo.models import (
    ANTHROPIC_VERSION,
    DEFAULT_PRICING,
    AnthropicClient,
    ClientState,
    ModelPrice,
    Pricing,
    cost,
)
from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelReply,
    NamedModelClient,
    ReplyDelta,
    StreamingModelClient,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
)
from tests.support.anthropic_server import (
    error,
    message,
    message_body,
    multiline,
    named,
    stream_events,
    streamed,
)
from tests.support.chat_server import Canned, open_chat_server
from tests.support.model_clients import ANTHROPIC_KEY as KEY
from tests.support.model_clients import HELLO, collect
from tests.support.model_clients import anthropic_client as client_for

pytestmark = pytest.mark.anyio


ADD = ToolSpec(
    name="add",
    description="Adds two numbers.",
    parameters={"type": "object", "properties": {"a": {"type": "number"}}},
)
NEG = ToolSpec(name="neg", parameters={"type": "object", "properties": {}})


async def test_a_plain_completion_sends_anthropics_headers_and_body() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(message("Hi there", usage=(7, 2)))
        reply = await client.complete([SystemMessage(content="be brief"), *HELLO])
    assert isinstance(client, StreamingModelClient)
    assert isinstance(client, NamedModelClient)
    assert (client.system, client.model) == ("anthropic", "claude-test")
    assert reply == ModelReply(
        message=AssistantMessage(content="Hi there"),
        finish_reason="stop",
        usage=Usage(prompt_tokens=7, completion_tokens=2),
        model="claude-test",
    )
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    }
    assert client.state is ClientState.CLOSED


async def test_tool_calls_and_results_map_to_tool_use_and_tool_result_blocks() -> None:
    conversation: list[Message] = [
        SystemMessage(content="use tools"),
        *HELLO,
        AssistantMessage(
            content="Let me add.",
            tool_calls=(
                ToolCall(id="c0", name="add", arguments='{"a": 1}'),
                ToolCall(id="c1", name="neg", arguments="not json"),
            ),
        ),
        ToolMessage(tool_call_id="c0", name="add", content="1"),
        ToolMessage(tool_call_id="c1", name="neg", content="bad arguments", is_error=True),
        SystemMessage(content="BUDGET turns 1/8"),  # the engine's budget line, mid-conversation
    ]
    async with open_chat_server() as server, client_for(server, max_tokens=256) as client:
        server.add(message(tool_uses=[("t1", "add", {"a": 2}), ("t2", "neg", {})]))
        reply = await client.complete(conversation, tools=[ADD, NEG])
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall(id="t1", name="add", arguments='{"a": 2}'),
        ToolCall(id="t2", name="neg", arguments="{}"),
    )
    body = server.requests[0].json
    assert body["max_tokens"] == 256
    assert body["system"] == "use tools"
    assert body["tools"] == [
        {
            "name": "add",
            "description": "Adds two numbers.",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}},
        },
        {"name": "neg", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me add."},
                {"type": "tool_use", "id": "c0", "name": "add", "input": {"a": 1}},
                {"type": "tool_use", "id": "c1", "name": "neg", "input": {}},
            ],
        },
        {  # both results in one user turn, the budget line after them
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c0", "content": "1"},
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": "bad arguments",
                    "is_error": True,
                },
                {"type": "text", "text": "BUDGET turns 1/8"},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("stop_reason", "ours"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "unknown"),
    ],
)
async def test_stop_reasons_map_to_finish_reasons(stop_reason: str, ours: str) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(message("cut", stop_reason=stop_reason))
        reply = await client.complete(HELLO)
    assert reply.finish_reason == ours


async def test_json_mode_and_options_reach_the_body() -> None:
    options = {"temperature": 0, "stop_sequences": ["END"]}
    async with open_chat_server() as server, client_for(server, options=options) as client:
        server.add(message('{"a": 1}'))
        reply = await client.complete(HELLO, json_mode=True)
    assert reply.text == '{"a": 1}'
    body = server.requests[0].json
    assert "JSON object" in body["system"]
    assert (body["temperature"], body["stop_sequences"]) == (0, ["END"])


async def test_usage_counts_cache_tokens_and_prices_them() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(message("ok", usage=(100, 20, 1000, 4000)))
        reply = await client.complete(HELLO)
    assert reply.usage == Usage(
        prompt_tokens=5100, completion_tokens=20, cache_creation_tokens=1000, cache_read_tokens=4000
    )
    assert reply.usage + reply.usage == Usage(
        prompt_tokens=10200,
        completion_tokens=40,
        cache_creation_tokens=2000,
        cache_read_tokens=8000,
    )
    # claude-sonnet-4: input 3, output 15, cache read 0.30, cache write 3.75 per million.
    expected = (100 * 3 + 4000 * 0.30 + 1000 * 3.75 + 20 * 15) / 1e6
    assert cost(reply.usage, "claude-sonnet-4-20250514") == pytest.approx(expected)
    assert DEFAULT_PRICING["claude-opus-4-5-20251101"].input == 5.0  # the longest family wins


async def test_cache_markers_go_on_the_system_prompt_the_tools_and_the_last_user_turn() -> None:
    conversation: list[Message] = [
        SystemMessage(content="long instructions"),
        *HELLO,
        AssistantMessage(tool_calls=(ToolCall(id="c0", name="add", arguments='{"a": 1}'),)),
        ToolMessage(tool_call_id="c0", name="add", content="1"),
        SystemMessage(content="BUDGET turns 1/8"),
    ]
    ephemeral = {"type": "ephemeral"}
    async with open_chat_server() as server, client_for(server, cache_prompt=True) as client:
        server.add(message("ok"), message("ok"))
        await client.complete(conversation, tools=[ADD, NEG])
        await client.complete(HELLO)
    body, plain = (received.json for received in server.requests)
    assert body["system"] == [
        {"type": "text", "text": "long instructions", "cache_control": ephemeral}
    ]
    assert [tool.get("cache_control") for tool in body["tools"]] == [None, ephemeral]
    last = body["messages"][-1]["content"]
    # On the tool result, not on the budget line that changes every turn.
    assert last[0]["cache_control"] == ephemeral
    assert "cache_control" not in last[1]
    assert plain["messages"][-1]["content"][-1]["cache_control"] == ephemeral
    assert json.dumps(body).count("cache_control") == 3


async def test_a_stream_yields_text_deltas_and_assembles_split_tool_input() -> None:
    events = stream_events(
        "Hel",
        "lo",
        tool_uses=[("t1", "add", ['{"a"', ": 4", "2}"]), ("t2", "neg", [])],
        usage=(11, 4, 0, 9),
        model="claude-served",
    )
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=events, done_marker=False))
        chunks = [chunk async for chunk in client.stream(HELLO, tools=[ADD])]
    assert chunks[:2] == [ReplyDelta(text="Hel", index=0), ReplyDelta(text="lo", index=1)]
    assert len(chunks) == 3
    reply = chunks[-1]
    assert isinstance(reply, ModelReply)
    assert reply.text == "Hello"
    assert reply.tool_calls == (
        ToolCall(id="t1", name="add", arguments='{"a": 42}'),
        ToolCall(id="t2", name="neg", arguments="{}"),
    )
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == Usage(prompt_tokens=20, completion_tokens=4, cache_read_tokens=9)
    assert reply.model == "claude-served"
    request = server.requests[0]
    assert request.json["stream"] is True
    assert request.headers["accept"] == "text/event-stream"


async def test_multi_line_data_ids_retry_fields_and_split_chunks_are_read() -> None:
    events = stream_events("one ", "two", usage=(5, 2))
    start, ping, block, first, second, *rest = events
    raw_second = multiline(*second)  # JSON over several data: lines, with id: and retry:
    cut = len(raw_second) // 2
    async with open_chat_server() as server, client_for(server) as client:
        server.add(
            Canned(
                events=[
                    b": a comment line\n\n",
                    start,
                    b"retry: 5000\n\n",  # a lone retry field: no event
                    ping,
                    block,
                    multiline(*first),
                    raw_second[:cut],  # one event cut across two chunks of the body
                    raw_second[cut:],
                    *rest,
                ],
                done_marker=False,
            )
        )
        chunks = [chunk async for chunk in client.stream(HELLO)]
    assert [c.text for c in chunks if isinstance(c, ReplyDelta)] == ["one ", "two"]
    final = chunks[-1]
    assert isinstance(final, ModelReply)
    assert (final.text, final.usage) == ("one two", Usage(prompt_tokens=5, completion_tokens=2))


@pytest.mark.parametrize(
    ("kind", "raised", "says"),
    [
        ("overloaded_error", Transient, "overloaded_error: Overloaded"),
        ("api_error", Transient, "failed mid-stream"),
        ("invalid_request_error", Fatal, "refused the request mid-stream"),
    ],
)
async def test_an_error_event_mid_stream_is_classified(
    kind: str, raised: type[Exception], says: str
) -> None:
    events = stream_events("par", stop=False)[:4]
    events.append(named({"type": "error", "error": {"type": kind, "message": "Overloaded"}}))
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=events, done_marker=False))
        seen: list[object] = []
        with pytest.raises(raised, match=says) as caught:
            await collect(client.stream(HELLO), seen)
    assert seen == [ReplyDelta(text="par", index=0)]
    assert type(caught.value) is raised


async def test_a_stream_cut_before_message_stop_is_transient() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(streamed("par", stop=False))
        with pytest.raises(Transient, match="before message_stop"):
            _ = [chunk async for chunk in client.stream(HELLO)]
        server.add(Canned(events=stream_events("par"), done_marker=False, drop_after=0))
        with pytest.raises(Transient):
            _ = [chunk async for chunk in client.stream(HELLO)]


@pytest.mark.parametrize("status", [429, 529])
async def test_rate_limits_and_overload_are_transient_with_retry_after(status: int) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(error(status, "slow down", **{"retry-after": "7"}))
        with pytest.raises(Transient, match=f"HTTP {status}: slow down") as caught:
            await client.complete(HELLO)
        assert caught.value.retry_after == 7.0
        assert "retry after 7 s" in str(caught.value)
        server.add(error(status, "slow down", **{"retry-after": "3"}))
        with pytest.raises(Transient) as streamed_failure:
            _ = [chunk async for chunk in client.stream(HELLO)]
        assert streamed_failure.value.retry_after == 3.0
    assert ("overloaded" if status == 529 else "rate limited") in str(caught.value)


async def test_server_errors_are_transient() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(error(500, "internal"))
        with pytest.raises(Transient, match="HTTP 500: internal") as caught:
            await client.complete(HELLO)
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (400, "HTTP 400: max_tokens: field required"),
        (401, "check ANTHROPIC_API_KEY"),
        (403, "may use this model"),
        (404, "ANTHROPIC_BASE_URL, the server's root without /v1"),
        (413, "too large"),
    ],
)
async def test_client_errors_are_fatal_and_say_what_to_fix(status: int, says: str) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(error(status, "max_tokens: field required"), error(status, "x"))
        with pytest.raises(Fatal, match=says) as caught:
            await client.complete(HELLO)
        with pytest.raises(Fatal):
            _ = [chunk async for chunk in client.stream(HELLO)]
    assert "max_tokens: field required" in str(caught.value)
    assert "/v1/messages" in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [b"<html>bad gateway</html>", json.dumps({"id": "x"}).encode(), b'{"content": "text"}'],
    ids=["not-json", "no-content", "content-not-a-list"],
)
async def test_a_body_that_is_not_a_message_is_recoverable(body: bytes) -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(body=body))
        with pytest.raises(Recoverable, match="not in the expected format"):
            await client.complete(HELLO)


async def test_garbage_in_a_stream_or_no_stream_at_all_is_recoverable() -> None:
    async with open_chat_server() as server, client_for(server) as client:
        server.add(Canned(events=["{not json"], done_marker=False))
        with pytest.raises(Recoverable, match="stream event"):
            _ = [chunk async for chunk in client.stream(HELLO)]
        server.add(Canned(body=message_body("a JSON body, not a stream")))
        with pytest.raises(Recoverable, match="not text/event-stream"):
            _ = [chunk async for chunk in client.stream(HELLO)]


async def test_the_environment_configures_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_chat_server() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.root + "/")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "env-ant-key-123456\n")
        monkeypatch.setenv("ARKHON_MODEL", "claude-env")
        async with AnthropicClient() as client:
            server.add(message("ok"))
            await client.complete(HELLO)
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "env-ant-key-123456"
    assert request.json["model"] == "claude-env"


def test_defaults_and_bad_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ARKHON_MODEL"):
        monkeypatch.delenv(name, raising=False)
    client = AnthropicClient()
    assert (client.model, client.base_url) == ("claude-haiku-4-5", "https://api.anthropic.com")
    assert client.url == "https://api.anthropic.com/v1/messages"
    assert "api_key=<none>" in repr(client)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigurationError, match="max_tokens must be a positive whole"):
            AnthropicClient(max_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        AnthropicClient(connect_timeout=0)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "bad key with spaces")
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicClient()


async def test_no_key_is_sent_when_none_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    async with open_chat_server() as server, AnthropicClient("m", base_url=server.root) as client:
        server.add(message("ok"))
        await client.complete(HELLO)
    assert "x-api-key" not in server.requests[0].headers


async def test_a_client_is_used_inside_its_async_with_only() -> None:
    client = AnthropicClient("m", api_key=KEY, base_url="http://127.0.0.1:9")
    with pytest.raises(Fatal, match="async with AnthropicClient"):
        await client.complete(HELLO)
    async with client:
        pass
    with pytest.raises(Fatal, match="closed"):
        await client.complete(HELLO)
    async with client:  # entered again: open again
        assert client.is_open
    assert not client.is_open


async def test_a_refused_connection_is_transient() -> None:
    async with open_chat_server() as server:
        root = server.root  # the port is free again once the server is gone
    async with AnthropicClient("m", api_key=KEY, base_url=root) as client:
        with pytest.raises(Transient, match="could not be reached"):
            await client.complete(HELLO)
        with pytest.raises(Transient, match="could not be reached"):
            _ = [chunk async for chunk in client.stream(HELLO)]


def test_cache_prices_default_to_the_input_price_and_must_not_be_negative() -> None:
    usage = Usage(
        prompt_tokens=1_000_000, completion_tokens=0, cache_read_tokens=400_000,
        cache_creation_tokens=100_000,
    )  # fmt: skip
    plain = Pricing({"m": (2.0, 8.0)})
    assert plain.cost(usage, "m") == pytest.approx(2.0)  # every prompt token at the input price
    cached = Pricing({"m": (2.0, 8.0, 0.2, 2.5)})
    assert cached.cost(usage, "m") == pytest.approx(0.5 * 2.0 + 0.4 * 0.2 + 0.1 * 2.5)
    with pytest.raises(ConfigurationError, match="non-negative"):
        ModelPrice(input=1, output=1, cache_read=-0.1)
    with pytest.raises(ConfigurationError, match="non-negative"):
        ModelPrice(input=1, output=1, cache_write=-1)


# httpx's own body iterators, left unexhausted when a stream is left early, warn
# when collected on trio (an httpx limitation, not a leak: the response is closed).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_stream_left_early_frees_its_slot_for_the_next_call() -> None:
    import anyio

    limiter = anyio.CapacityLimiter(1)
    async with open_chat_server() as server, client_for(server, limiter=limiter) as client:
        server.add(streamed("first ", "of many"), message("next"))
        chunks = client.stream(HELLO)
        assert await anext(aiter(chunks)) == ReplyDelta(text="first ", index=0)
        await chunks.aclose()  # type: ignore[attr-defined]
        assert limiter.borrowed_tokens == 0
        assert (await client.complete(HELLO)).text == "next"


def test_a_message_delta_updates_only_the_counts_it_carries() -> None:
    from arkhon_rheo.models._anthropic_wire import usage

    started = usage(
        {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 90}, Usage()
    )
    assert started == Usage(prompt_tokens=100, completion_tokens=1, cache_read_tokens=90)
    assert usage({"output_tokens": 40}, started) == Usage(
        prompt_tokens=100, completion_tokens=40, cache_read_tokens=90
    )
    # The newer API repeats the input side, cumulative, in message_delta.
    again = {"input_tokens": 10, "output_tokens": 41, "cache_creation_input_tokens": 5}
    assert usage(again, started) == Usage(
        prompt_tokens=105, completion_tokens=41, cache_read_tokens=90, cache_creation_tokens=5
    )
    assert usage(None, started) == started
    assert usage({"input_tokens": -3, "output_tokens": "x"}) == Usage()
