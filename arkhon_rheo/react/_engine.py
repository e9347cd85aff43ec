"""The ReAct engine: a think → act loop over a model client and tools, as an ordinary `Machine`.

`react_agent` builds the machine. Its three stages declare honest read and
write sets, so permissions, invariants, gates, durability, resume, fork and
replay apply to an agent exactly as to any machine:

- ``start`` (Initialized → Thinking) writes the system prompt and the task
  into ``messages``.
- ``think`` (Thinking → Acting, or Finished) asks the model, through
  `record_call` so a replay can answer it from the record; checks the reply
  (bounded format retries, the error shown to the model); counts turns,
  tokens, cost and time against the `Budget`; and either leaves tool calls in
  ``pending`` or records the final answer and why the agent finished.
- ``act`` (Acting → Thinking) runs the pending tool calls concurrently
  (bounded) and appends their results to ``messages`` in call order.
"""

from __future__ import annotations

import functools
import time
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import TypeAdapter, ValidationError

from .. import _tracing
from .._errors import ConfigurationError, Fatal, Recoverable
from .._log import get_logger
from ..models import ModelPrice, Pricing
from ..protocols import (
    Condition,
    Lifecycle,
    Machine,
    Message,
    ModelClient,
    ModelReply,
    Patch,
    ReplyDelta,
    Stage,
    StateView,
    StreamingModelClient,
    SystemMessage,
    ToolMessage,
    ToolRunner,
    UserMessage,
    emit,
    record_call,
    record_stream,
)
from ..protocols._seams import current_injector, current_session
from ._budget import Budget, Used
from ._calls import MalformedModelOutput, bad_arguments, tail, tool_runner, unwrap
from ._context import PromptCache, trim_messages
from ._state import AgentExit, ReactState

if TYPE_CHECKING:
    import enum
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence

    from ..protocols import Gate, ToolCall, ToolSpec

__all__ = ["DEFAULT_SYSTEM_PROMPT", "react_agent"]

L = Lifecycle
_log = get_logger("arkhon_rheo.react")

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful agent. Use the tools when they help; when you know the answer, "
    "reply with it in plain text and call no tool."
)


async def _now() -> float:
    return time.time()


def react_agent(
    model: ModelClient,
    tools: ToolRunner | Sequence[Any] = (),
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    budget: Budget | None = None,
    max_steps: int = 50,
    max_format_retries: int = 2,
    max_parallel_tools: int = 8,
    json_mode: bool = False,
    answer_type: Any = None,
    cache: PromptCache | None = None,
    max_context_tokens: int | None = None,
    prices: Pricing | Mapping[str, ModelPrice | tuple[float, float]] | None = None,
    stream: bool = False,
    state_type: type[ReactState] = ReactState,
    name: str = "react-agent",
    gates: Sequence[Gate] = (),
    deadlines: Mapping[enum.Enum, float] | None = None,
) -> Machine[ReactState]:
    """Build a ReAct agent: an ordinary `Machine` over a model client and tools.

    Run it like any machine: ``await system.run(agent, ReactState(task="..."))``.

    Args:
        model: The model client (shared by every session of the machine).
        tools: A `ToolRunner` (an ``arkhon_rheo.tools.Toolbox``), or the tools
            themselves (functions decorated with ``@tool``), put in a toolbox.
        system_prompt: The first message of every conversation; None for none.
        budget: Limits on turns, tool calls, tokens, cost and time; reaching one
            gives the model a wrap-up turn without tools.
        max_steps: The hard cap on model turns: past it the agent ends with
            `AgentExit.MAX_STEPS` and no answer (a warning is logged).
        max_format_retries: How many times a reply the engine cannot use is sent
            back to the model with what was wrong, before `MalformedModelOutput`.
        max_parallel_tools: How many tool calls of one turn run at once.
        json_mode: Ask the model for JSON replies.
        answer_type: A type the final answer must be JSON of (validated with
            pydantic; implies ``json_mode``); the answer stays the JSON text.
        cache: A `PromptCache` answering repeated prompts without the model.
        max_context_tokens: Trim the oldest turns past this token estimate
            (the system prompt and the latest turn always stay).
        prices: Input and output price per million tokens, by model name (a
            dated name like ``gpt-4o-mini-2024-07-18`` gets its family's price),
            for ``state.cost``; a `Pricing` or a mapping.
        stream: Stream each reply (the model must be a `StreamingModelClient`):
            its text pieces are emitted as partial output (`SessionHandle.stream`)
            and recorded chunk by chunk for replay; the prompt cache is not used.
        state_type: `ReactState` or your subclass of it.
        name: The machine's name.
        gates: Human-in-the-loop gates (``Gate.before("act")`` to approve tool calls).
        deadlines: Per-state deadlines in seconds (``{Lifecycle.ACTING: 30}``).

    Returns:
        The machine.

    Raises:
        ConfigurationError: If an argument is out of range or ``state_type`` is
            not a `ReactState`.
    """
    if not (isinstance(state_type, type) and issubclass(state_type, ReactState)):
        raise ConfigurationError(
            f"react_agent: state_type must be ReactState or a subclass, got {state_type!r}"
        )
    for label, value in (
        ("max_steps", max_steps),
        ("max_parallel_tools", max_parallel_tools),
        ("max_format_retries", max_format_retries + 1),
    ):
        if value < 1:
            raise ConfigurationError(f"react_agent: {label} must be at least 1, got {value}")
    runner = tool_runner(tools)
    limits = budget or Budget()
    timed = limits.max_seconds is not None
    pricing = prices if isinstance(prices, Pricing) or prices is None else Pricing(prices)
    if stream and not isinstance(model, StreamingModelClient):
        raise ConfigurationError(
            f"react_agent(stream=True) needs a model client with stream(); {model!r} has none"
        )
    answer_adapter = TypeAdapter(answer_type) if answer_type is not None else None
    ask_json = json_mode or answer_adapter is not None

    # For the model-call spans (OpenTelemetry's GenAI conventions), when tracing is on.
    system = str(getattr(model, "system", "") or type(model).__name__)
    model_name = str(getattr(model, "model", "") or "")

    class Start(Stage[ReactState], name="start", reads={"task", "messages"}, writes={"messages"}):
        async def execute(self, view: StateView[ReactState]) -> Patch:
            if len(view.messages):
                return Patch()  # a conversation given by the caller: keep it as it is
            if not view.task:
                raise Fatal("nothing to do: start the agent with ReactState(task='...')")
            opening: list[Message] = [UserMessage(content=view.task)]
            if system_prompt is not None:
                opening.insert(0, SystemMessage(content=system_prompt))
            return Patch().append("messages", *opening)

        def next(self, state: ReactState) -> enum.Enum:
            return L.THINKING

    class Think(
        Stage[ReactState],
        name="think",
        reads={
            "messages",
            "turns",
            "tool_calls",
            "usage",
            "cost",
            "started_at",
            "wrapup",
            "stop",
        },
        writes={
            "messages",
            "pending",
            "turns",
            "usage",
            "cost",
            "started_at",
            "elapsed",
            "wrapup",
            "answer",
            "exit",
        },
    ):
        async def execute(self, view: StateView[ReactState]) -> Patch:
            if view.stop:
                return Patch(exit=AgentExit.STOPPED)
            if view.turns >= max_steps:
                _log.warning("react_max_steps", turns=view.turns, max_steps=max_steps)
                return Patch(exit=AgentExit.MAX_STEPS)
            started, elapsed = view.started_at, 0.0
            if timed:  # the clock is read (and recorded, for replay) only when time is limited
                now = await record_call("clock", {"turn": view.turns}, _now, returns=float)
                started = now if started is None else started
                elapsed = max(0.0, now - started)
            turns, usage, cost = view.turns, view.usage, view.cost
            wrapup = view.wrapup
            new: list[Message] = []
            if not wrapup:
                used = Used(turns, view.tool_calls, usage.total_tokens, cost, elapsed)
                reason = limits.exhausted(used)
                if reason is not None:
                    wrapup = True
                    new.append(
                        UserMessage(
                            content=f"Budget reached ({reason}). Give your final answer now, "
                            "in text; no tools are available."
                        )
                    )
            offered: Sequence[ToolSpec] = () if wrapup else runner.specs
            problem = ""
            for attempt in range(max_format_retries + 1):
                conversation = (*view.messages, *new)
                used = Used(turns, view.tool_calls, usage.total_tokens, cost, elapsed)
                line = limits.render(used, wrapup=wrapup)
                payload: tuple[Message, ...] = trim_messages(conversation, max_context_tokens)
                if line:
                    payload = (*payload, SystemMessage(content=line))
                request = {
                    "turn": turns,
                    "attempt": attempt,
                    "new": tail(conversation),
                    "tools": [spec.name for spec in offered],
                    "budget": line,
                }
                with _tracing.model_call(system, model_name) as span:
                    if stream:
                        reply = await self._stream(request, payload, offered)
                    else:
                        reply = await record_call(
                            "model",
                            request,
                            functools.partial(self._ask, payload, offered),
                            returns=ModelReply,
                        )
                    _tracing.model_reply(
                        span,
                        reply.model,
                        reply.usage.prompt_tokens,
                        reply.usage.completion_tokens,
                        reply.finish_reason,
                    )
                turns += 1
                usage = usage + reply.usage
                if pricing is not None:
                    cost += pricing.cost(reply.usage, reply.model)
                new.append(reply.message)
                problem, feedback = self._check(reply, wrapup)
                if not problem:
                    break
                _log.info("react_format_retry", attempt=attempt + 1, problem=problem)
                new.extend(feedback)
            else:
                raise MalformedModelOutput(problem, retries=max_format_retries)
            patch = Patch(
                turns=turns,
                usage=usage,
                cost=cost,
                started_at=started,
                elapsed=elapsed,
                wrapup=wrapup,
            ).append("messages", *new)
            if reply.tool_calls:
                return patch.set(pending=reply.tool_calls)
            exit_reason = AgentExit.BUDGET_EXHAUSTED if wrapup else AgentExit.ANSWERED
            return patch.set(pending=(), answer=reply.text, exit=exit_reason)

        async def _ask(self, payload: Sequence[Message], offered: Sequence[ToolSpec]) -> ModelReply:
            key = ""
            if cache is not None:
                key = cache.key(payload, offered, ask_json)
                hit = cache.get(key)
                if hit is not None:
                    return hit
            if current_injector() is None:
                reply = await model.complete(payload, tools=offered, json_mode=ask_json)
            else:  # the model seam of fault injection
                alter = await _inject_model(len(payload))
                reply = await model.complete(payload, tools=offered, json_mode=ask_json)
                if alter is not None:
                    reply = alter(reply)
            if cache is not None:
                cache.put(key, reply)
            return reply

        async def _stream(
            self, request: Any, payload: Sequence[Message], offered: Sequence[ToolSpec]
        ) -> ModelReply:
            assert isinstance(model, StreamingModelClient)
            final: ModelReply | None = None
            chunks = record_stream(
                "model",
                request,
                lambda: (
                    model.stream(payload, tools=offered, json_mode=ask_json)
                    if current_injector() is None
                    else _faulted_stream(model, payload, offered, ask_json)
                ),
                returns=ReplyDelta | ModelReply,
            )
            async with aclosing(chunks):
                async for chunk in chunks:
                    if isinstance(chunk, ReplyDelta):
                        emit(chunk)  # never waits: a slow reader loses pieces, not time
                    else:
                        final = chunk
            if final is None:
                raise Recoverable("the model's stream ended without its full reply")
            return final

        @staticmethod
        def _check(reply: ModelReply, wrapup: bool) -> tuple[str, list[Message]]:
            """What is wrong with ``reply`` ("" if nothing), and the messages that say so."""
            calls = reply.tool_calls
            if calls:
                problems = [
                    "no tools are available in the wrap-up turn: answer in text"
                    if wrapup
                    else bad_arguments(call)
                    for call in calls
                ]
                if not any(problems):
                    return "", []
                answers: list[Message] = [
                    ToolMessage(
                        tool_call_id=call.id,
                        name=call.name,
                        content=f"error: {problem}; call again with corrected arguments"
                        if problem
                        else "not run: another call of this turn was malformed",
                        is_error=True,
                    )
                    for call, problem in zip(calls, problems, strict=True)
                ]
                return next(p for p in problems if p) or "", answers
            text = reply.text or ""
            if not text.strip():
                problem = "the reply was empty: answer in text or call a tool"
                return problem, [UserMessage(content=f"Your reply could not be used: {problem}.")]
            if answer_adapter is not None:
                try:
                    answer_adapter.validate_json(text)
                except ValidationError as exc:
                    problem = "the answer does not fit the expected JSON schema: " + "; ".join(
                        f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}"
                        for e in exc.errors(include_url=False)
                    )
                    message = f"Your reply could not be used: {problem}. Reply with JSON only."
                    return problem, [UserMessage(content=message)]
            return "", []

        def next(self, state: ReactState) -> enum.Enum:
            return L.FINISHED if state.exit is not None else L.ACTING

    class Act(
        Stage[ReactState],
        name="act",
        reads={"pending", "tool_calls"},
        writes={"messages", "pending", "tool_calls"},
    ):
        async def execute(self, view: StateView[ReactState]) -> Patch:
            calls = view.pending
            if len(calls) == 1:  # the common case: no task group needed
                result = await runner.call(calls[0])
                return Patch(pending=(), tool_calls=view.tool_calls + 1).append("messages", result)
            results: list[ToolMessage | None] = [None] * len(calls)
            limiter = anyio.CapacityLimiter(max_parallel_tools)

            async def run(index: int, call: ToolCall) -> None:
                async with limiter:
                    results[index] = await runner.call(call)

            try:
                async with anyio.create_task_group() as group:
                    for index, call in enumerate(calls):
                        group.start_soon(run, index, call)
            except BaseExceptionGroup as errors:
                raise unwrap(errors) from None
            done = [result for result in results if result is not None]
            return Patch(pending=(), tool_calls=view.tool_calls + len(calls)).append(
                "messages", *done
            )

        def next(self, state: ReactState) -> enum.Enum:
            return L.THINKING

    return Machine(
        name=name,
        state_type=state_type,
        initial=L.INITIALIZED,
        transitions={
            L.INITIALIZED: {L.THINKING, L.FAILED},
            L.THINKING: {L.ACTING, L.FINISHED, L.FAILED},
            L.ACTING: {L.THINKING, L.FAILED},
        },
        stages={L.INITIALIZED: Start, L.THINKING: Think, L.ACTING: Act},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        invariants={
            L.FINISHED: [
                Condition("a finished agent says why it finished", lambda s: s.exit is not None),
                Condition(
                    "an answered agent has an answer",
                    lambda s: s.exit is not AgentExit.ANSWERED or bool(s.answer),
                ),
            ],
            L.ACTING: [Condition("acting needs pending tool calls", lambda s: bool(s.pending))],
        },
        gates=gates,
        deadlines=deadlines,
    )


async def _inject_model(messages: int) -> Callable[[Any], Any] | None:
    injector = current_injector()
    if injector is None:
        return None
    return await injector.inject("model", current_session(), {"messages": messages})


async def _faulted_stream(
    model: StreamingModelClient,
    payload: Sequence[Message],
    offered: Sequence[ToolSpec],
    json_mode: bool,
) -> AsyncIterator[ReplyDelta | ModelReply]:
    """A model stream under an installed fault plan: its fault acted out, its reply altered."""
    alter = await _inject_model(len(payload))
    async for chunk in model.stream(payload, tools=offered, json_mode=json_mode):
        yield alter(chunk) if alter is not None and isinstance(chunk, ModelReply) else chunk
