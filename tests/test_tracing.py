"""OpenTelemetry spans: a session, each stage attempt, each model and tool call."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem, Backoff, Fatal, _tracing
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import AssistantMessage, ModelReply, ToolCall, Usage
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool
from tests.support.observe_machine import OUTCOMES, Flow, flow_machine, troubled

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytest.importorskip("opentelemetry.sdk", reason="the `otel` extra (and opentelemetry-sdk) absent")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

pytestmark = pytest.mark.anyio

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process: this module sets it on first use.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    OUTCOMES.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _reply(text: str | None, *calls: ToolCall, usage: tuple[int, int]) -> ModelReply:
    return ModelReply(
        message=AssistantMessage(content=text, tool_calls=calls),
        finish_reason="tool_calls" if calls else "stop",
        usage=Usage(prompt_tokens=usage[0], completion_tokens=usage[1]),
        model="scripted-2024",
    )


def _by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        found.setdefault(span.name, []).append(span)
    return found


async def test_an_agent_run_is_a_tree_of_session_stage_model_and_tool_spans(
    spans: InMemorySpanExporter,
) -> None:
    assert _tracing.ENABLED
    call = ToolCall(id="c1", name="add", arguments=json.dumps({"a": 2, "b": 3}))
    model = ScriptedModel(
        [_reply(None, call, usage=(12, 3)), _reply("5", usage=(20, 1))], model="scripted"
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(model, [add]), ReactState(task="2+3"))
    assert result.ok, result.failure
    named = _by_name(spans.get_finished_spans())
    (session,) = named["session react-agent"]
    attributes: Any = session.attributes
    assert attributes["arkhon.session_id"] == result.session_id
    assert attributes["arkhon.exit_reason"] == "finished"
    assert attributes["arkhon.steps"] == 4
    stages = [s for name, found in named.items() if name.startswith("stage ") for s in found]
    assert sorted(s.name for s in stages) == [
        "stage act",
        "stage start",
        "stage think",
        "stage think",
    ]
    assert session.context is not None
    assert all(s.parent is not None and s.parent.span_id == session.context.span_id for s in stages)
    first, second = named["chat scripted"]
    think_ids = {s.context.span_id for s in named["stage think"] if s.context is not None}
    assert first.parent is not None
    assert first.parent.span_id in think_ids
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "ScriptedModel",
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": "scripted-2024",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert (second.attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)
    assert first.kind is trace.SpanKind.CLIENT
    (tool_span,) = named["execute_tool add"]
    (act,) = named["stage act"]
    assert tool_span.parent is not None
    assert act.context is not None
    assert tool_span.parent.span_id == act.context.span_id
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
    }


async def test_failed_attempts_and_failed_sessions_have_an_error_status(
    spans: InMemorySpanExporter,
) -> None:
    troubled()
    async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0, max_attempts=3)) as system:
        assert (await system.run(flow_machine(), Flow())).ok
        OUTCOMES[:] = [Fatal("a bug")]
        failed = await system.run(flow_machine(), Flow(), session_id="bad")
    assert failed.exit_reason.value == "failed"
    work = [s for s in spans.get_finished_spans() if s.name == "stage work"]
    outcomes = [((s.attributes or {})["arkhon.attempt"], s.status.status_code.name) for s in work]
    # transient then retried, recoverable (a restart), then the good run; the bad session's one.
    assert outcomes == [(1, "ERROR"), (2, "ERROR"), (1, "UNSET"), (1, "ERROR")]
    assert work[0].events[0].name == "exception"
    (bad,) = [
        s
        for s in spans.get_finished_spans()
        if s.name == "session flow" and (s.attributes or {})["arkhon.session_id"] == "bad"
    ]
    assert bad.status.status_code is trace.StatusCode.ERROR
    assert bad.status.description == "Fatal: a bug"


def _with_cause(error: Exception, cause: Exception) -> Exception:
    error.__cause__ = cause
    return error


async def test_spans_record_no_secret_of_a_failure(spans: InMemorySpanExporter) -> None:
    key = "key-seen-by-a-span-0123456789"
    OpenAIChatClient("m", api_key=key)  # the library is given the key
    OUTCOMES[:] = [_with_cause(Fatal(f"stage says {key}"), RuntimeError(f"header {key}"))]
    model = ScriptedModel(
        [_with_cause(Fatal(f"model says {key}"), UnicodeEncodeError("ascii", key, 0, 1, "no"))]
    )
    async with AgentSystem(path=None) as system:
        failed = await system.run(flow_machine(), Flow(), session_id="leaky")
        react = await system.run(react_agent(model, [add]), ReactState(task="2+3"))
    assert not failed.ok
    assert not react.ok
    finished = spans.get_finished_spans()
    named = _by_name(finished)
    (chat,) = named["chat scripted"]
    (work,) = named["stage work"]
    for span in (chat, work):
        assert span.status.status_code is trace.StatusCode.ERROR
        (event,) = span.events
        assert event.name == "exception"
        assert "[REDACTED]" in str((event.attributes or {})["exception.message"])
        assert "[REDACTED]" in str((event.attributes or {})["exception.stacktrace"])
    shown = "".join(span.to_json() for span in finished)
    assert "says [REDACTED]" in shown
    pieces = {key[i : i + 8] for i in range(len(key) - 7)}
    assert not [piece for piece in pieces if piece in shown]


async def test_spans_show_no_sensitive_value(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="the `secrets` extra is not installed")
    from arkhon_rheo.core import Keyring
    from tests.support.sensitive import FAILURES, SECRETS, TOKEN, Vault, vault

    FAILURES.clear()
    keyring = Keyring(Keyring.generate())
    async with AgentSystem(path=tmp_path / "vault.db", secrets=keyring) as system:
        paused = await system.run(vault, Vault(token=TOKEN), session_id="v1")
        await (await system.stored(vault, "v1").approve()).result()
    FAILURES.clear()
    assert paused.state.last_error is not None  # the failure that quoted the token
    finished = spans.get_finished_spans()
    assert {"session vault", "stage check"} <= set(_by_name(finished))
    failed = [span for span in _by_name(finished)["stage check"] if span.events]
    assert len(failed) == 2  # the transient failure, then the recoverable one
    assert all("token [REDACTED]" in str(span.events[0].attributes) for span in failed)
    shown = "".join(span.to_json() for span in finished)
    for secret in SECRETS:
        assert secret not in shown


def test_without_opentelemetry_nothing_is_traced() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None; "
        "from arkhon_rheo import _tracing as t; "
        "print(t.ENABLED, t.start_session('s', 'm'), t.step(None, 'x', 1, 1), "
        "t.model_call('a', 'b'), t.tool_call('x', 'c'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    nothing = "<contextlib.nullcontext object"
    assert result.stdout.startswith("False None " + nothing)
    assert result.stdout.count(nothing) == 3
