"""The model client under supervision, its secrets kept out of logs, and pricing."""

from __future__ import annotations

import json

import pytest
import structlog.testing

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Fatal,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    Transient,
    record_call,
    redact_secrets,
    stage,
)
from arkhon_rheo.models import DEFAULT_PRICING, ModelPrice, OpenAIChatClient, Pricing, cost
from arkhon_rheo.protocols import ModelReply, Usage, UserMessage
from arkhon_rheo.supervision import Backoff
from tests.support.chat_server import Canned, open_chat_server

pytestmark = pytest.mark.anyio

L = Lifecycle
KEY = "sk-proj-secret-key-abcdef0123456789"


class Chat(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    answer: str = ""


def ask_machine(client: OpenAIChatClient) -> Machine[Chat]:
    @stage(reads=set(), writes={"answer"}, next=L.FINISHED, name="ask")
    async def ask(view: StateView[Chat]) -> Patch:
        messages = [UserMessage(content="What is 6 times 7?")]
        reply = await record_call(
            "model",
            client.request_body(messages),
            lambda: client.complete(messages),
            returns=ModelReply,
        )
        return Patch(answer=reply.text or "")

    return Machine(
        name="ask",
        state_type=Chat,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: ask},
    )


async def test_a_session_rides_out_a_429_storm() -> None:
    storm = [Canned.error(429, "rate limited", **{"Retry-After": "0"}) for _ in range(3)]
    async with open_chat_server() as server:
        server.add(*storm, Canned.completion("42"))
        client = OpenAIChatClient("test-model", api_key=KEY, base_url=server.url)
        backoff = Backoff(base=0, cap=0, max_attempts=5)
        async with client, AgentSystem(seed=1, backoff=backoff) as system:
            handle = await system.start(ask_machine(client), Chat(), session_id="storm")
            result = await handle.result()
            (event,) = await handle.history()
    assert result.exit_reason is ExitReason.FINISHED, result.failure
    assert isinstance(result.state, Chat)
    assert result.state.answer == "42"
    assert result.retries == 3
    assert len(server.requests) == 4
    assert event.attempt == 4
    # What is recorded for replay is the request body: no headers, no key.
    recorded = json.dumps(event.info)
    assert "test-model" in recorded
    assert KEY not in recorded
    assert "uthorization" not in recorded


async def test_a_fatal_answer_fails_the_session_with_its_message() -> None:
    async with open_chat_server() as server:
        server.add(Canned.error(401, f"Incorrect API key provided: {KEY}"))
        client = OpenAIChatClient("test-model", api_key=KEY, base_url=server.url)
        async with client, AgentSystem(backoff=Backoff(base=0, cap=0)) as system:
            result = await system.run(ask_machine(client), Chat(), session_id="denied")
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert "OPENAI_API_KEY" in result.failure.message
    assert KEY not in result.failure.message


async def test_the_key_never_reaches_logs_errors_or_reprs() -> None:
    failures: list[Exception] = []
    with structlog.testing.capture_logs(processors=[redact_secrets]) as logs:
        async with open_chat_server() as server:
            # A server that echoes the key back, as some do in their error messages.
            server.add(
                Canned.error(401, f"bad key {KEY}"),
                Canned.error(429, f"Bearer {KEY} is over its quota"),
                Canned(body=f"<html>{KEY}</html>"),
            )
            async with OpenAIChatClient("m", api_key=KEY, base_url=server.url) as client:
                assert KEY not in repr(client)
                for _ in range(3):
                    try:
                        await client.complete([UserMessage(content="hi")])
                    except Exception as exc:
                        failures.append(exc)
                structlog.get_logger("arkhon_rheo.test").info(
                    "configured", api_key=KEY, headers={"Authorization": f"Bearer {KEY}"}
                )
    assert [type(f) for f in failures] == [Fatal, Transient, type(failures[2])]
    for failure in failures:
        for shown in (str(failure), repr(failure), repr(failure.args)):
            assert KEY not in shown
        assert KEY not in str(failure.__cause__ or "")
    assert logs, "the client logs its failures"
    assert KEY not in repr(logs)
    configured = next(entry for entry in logs if entry["event"] == "configured")
    assert configured["api_key"] == "[REDACTED]"
    assert configured["headers"] == {"Authorization": "[REDACTED]"}


def test_redaction_masks_credential_keys_and_secret_looking_text() -> None:
    event = redact_secrets(
        None,
        "info",
        {
            "event": "call",
            "password": "hunter2",
            "x-api-key": "abc",
            "client_secret": "s",
            "prompt_tokens": 12,  # not a credential
            "note": "used Bearer abc.def and sk-live-abcdefgh1234 today",
            "nested": [{"token": "t"}],
        },
    )
    assert event == {
        "event": "call",
        "password": "[REDACTED]",
        "x-api-key": "[REDACTED]",
        "client_secret": "[REDACTED]",
        "prompt_tokens": 12,
        "note": "used Bearer [REDACTED] and [REDACTED] today",
        "nested": [{"token": "[REDACTED]"}],
    }


def test_pricing_costs_usage_per_million_tokens() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=500_000)
    assert cost(usage, "gpt-4o-mini") == pytest.approx(0.15 + 0.30)
    assert cost(usage, "gpt-4o-mini-2024-07-18") == pytest.approx(0.45)  # its family's price
    assert DEFAULT_PRICING["gpt-4o-2024-08-06"] == DEFAULT_PRICING["gpt-4o"]
    mine = Pricing({"local": (0, 0), "big": ModelPrice(input=10, output=30)})
    assert mine.cost(usage, "big") == pytest.approx(25.0)
    assert cost(usage, "local", mine) == 0
    with pytest.raises(ConfigurationError, match="no price known for model 'other'"):
        cost(usage, "other", mine)
    with pytest.raises(ConfigurationError):
        ModelPrice(input=-1, output=0)
