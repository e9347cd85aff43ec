"""OpenTelemetry spans for sessions, stage steps, model calls and tool calls, when installed.

With ``opentelemetry-api`` installed (``pip install 'arkhon-rheo[otel]'``) the
library opens, on the tracer provider your application sets:

- ``session <machine>``: one span per run of a session (a resume opens a new
  one), with ``arkhon.session_id``, ``arkhon.machine``, and at its end
  ``arkhon.exit_reason`` and ``arkhon.steps``; its status is an error when the
  session ended with a failure record.
- ``stage <name>``: one span per attempt of a stage, a child of its session's
  span, with ``arkhon.stage``, ``arkhon.seq`` and ``arkhon.attempt``; an error
  status when the attempt failed.
- ``chat <model>``: one per model call of the ReAct engine, with the GenAI
  semantic conventions (``gen_ai.operation.name``, ``gen_ai.system``,
  ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``gen_ai.response.finish_reasons``).
- ``execute_tool <name>``: one per `Toolbox` call (``gen_ai.operation.name``,
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``).

Model and tool spans are children of the stage span that made the call when
the stage's actor runs in its supervisor's task (as it does while it is idle).

An exception is recorded on a span (an ``exception`` event: its type, message
and formatted traceback, chained causes included) and in its error status
scrubbed of secrets (``_redact.scrub``), never as the SDK would record it.

Without the package nothing is imported and every function here returns at
its first line (`ENABLED` is decided once, at import). With it but no tracer
provider set, a session opens no span and so its steps none either. This module imports
nothing from the package but the leaf ``_redact``, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import TYPE_CHECKING, Any, Final

from ._redact import scrub

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager

try:
    from opentelemetry import trace as _otel
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _otel = None  # type: ignore[assignment]

__all__ = [
    "ENABLED",
    "NOTHING",
    "end_session",
    "model_call",
    "model_reply",
    "start_session",
    "step",
    "step_outcome",
    "tool_call",
]

#: Whether OpenTelemetry's API is installed; checked once, here.
ENABLED: Final = _otel is not None

#: A proxy until the application sets a provider; then its real tracer.
_tracer: Any = _otel.get_tracer("arkhon_rheo") if _otel is not None else None
_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()
#: What a span's function gives while tracing is off: no span is opened.
NOTHING: Final = _NOTHING


def _active() -> bool:
    """Whether the application has set a tracer provider (without one, spans cost only).

    While none is set (in code, or named by the environment when the process
    started) the answer comes without asking OpenTelemetry, whose look-up reads
    the environment each time (and raises and catches a ``KeyError`` doing so):
    twice a ReAct cycle, that was a tenth of the objects the cycle made.
    """
    if getattr(_otel, "_TRACER_PROVIDER", _UNKNOWN) is None and not _FROM_ENVIRONMENT:
        return False
    provider = _otel.get_tracer_provider()
    return not isinstance(provider, _otel.ProxyTracerProvider | _otel.NoOpTracerProvider)


_UNKNOWN = object()
#: Whether the environment named a tracer provider when the process started.
_FROM_ENVIRONMENT: Final = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def start_session(session_id: str, machine: str) -> Any:
    """Start the span of one run of a session (ended by `end_session`); ``None`` if off."""
    if _otel is None or not _active():
        return None
    return _tracer.start_span(
        f"session {machine}",
        attributes={"arkhon.session_id": session_id, "arkhon.machine": machine},
    )


def end_session(span: Any, exit_reason: str | None, steps: int, failure: Any) -> None:
    """End a session's span with how it ended (``failure``: its `FailureRecord`, if any)."""
    if span is None:
        return
    if exit_reason is not None:
        span.set_attribute("arkhon.exit_reason", exit_reason)
    span.set_attribute("arkhon.steps", steps)
    if failure is not None:
        span.set_status(
            _otel.Status(_otel.StatusCode.ERROR, scrub(f"{failure.error_type}: {failure.message}"))
        )
    span.end()


def step(parent: Any, stage: str, seq: int, attempt: int) -> AbstractContextManager[Any]:
    """The span of one attempt of a stage, current while it runs (nothing if off)."""
    if parent is None:
        return _NOTHING
    return _span(
        f"stage {stage}",
        "INTERNAL",
        {"arkhon.stage": stage, "arkhon.seq": seq, "arkhon.attempt": attempt},
        context=_otel.set_span_in_context(parent),
    )


def step_outcome(span: Any, outcome: object) -> None:
    """Mark a stage's span failed when its outcome is an error."""
    if span is not None and isinstance(outcome, Exception):
        record_exception(span, outcome)
        span.set_status(_otel.Status(_otel.StatusCode.ERROR, f"{type(outcome).__name__}"))


def record_exception(span: Any, exc: BaseException, *, escaped: bool = False) -> None:
    """Record ``exc`` on ``span`` as the SDK does, its message and traceback scrubbed."""
    span.record_exception(
        exc,
        attributes={
            "exception.message": scrub(str(exc)),
            "exception.stacktrace": scrub("".join(traceback.format_exception(exc))),
        },
        escaped=escaped,
    )


@contextlib.contextmanager
def _span(name: str, kind: str, attributes: dict[str, Any], context: Any = None) -> Iterator[Any]:
    """A span current while the block runs; an exception leaving it is recorded scrubbed."""
    with _tracer.start_as_current_span(
        name,
        context=context,
        kind=getattr(_otel.SpanKind, kind),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            if span.is_recording():
                record_exception(span, exc, escaped=True)
                span.set_status(
                    _otel.Status(_otel.StatusCode.ERROR, scrub(f"{type(exc).__name__}: {exc}"))
                )
            raise


def model_call(system: str, model: str) -> AbstractContextManager[Any]:
    """The span of one model call (``chat <model>``), current while it runs."""
    if _otel is None or not _active():
        return _NOTHING
    return _span(
        f"chat {model}",
        "CLIENT",
        {"gen_ai.operation.name": "chat", "gen_ai.system": system, "gen_ai.request.model": model},
    )


def model_reply(
    span: Any, model: str, input_tokens: int, output_tokens: int, finish_reason: str
) -> None:
    """Put what a model call returned on its span (the GenAI usage attributes)."""
    if span is None:
        return
    span.set_attributes(
        {
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.response.finish_reasons": (finish_reason,),
        }
    )


def tool_call(name: str, call_id: str) -> AbstractContextManager[Any]:
    """The span of one tool call (``execute_tool <name>``), current while it runs."""
    if _otel is None or not _active():
        return _NOTHING
    return _span(
        f"execute_tool {name}",
        "INTERNAL",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        },
    )
