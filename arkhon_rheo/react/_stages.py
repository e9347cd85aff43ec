"""The ReAct engine's three stages, each reading its settings from a bound `ReactConfig`.

A machine's stages are classes its supervisor makes one instance of per
session, with no arguments; `ReactStage.bind` gives each machine its own
subclass carrying that machine's configuration (the stage's name, reads and
writes stay those declared here).

- `StartStage` (Initialized → Thinking) writes the system prompt and the task
  into ``messages``.
- `ThinkStage` (Thinking → Acting, or Finished) asks the model, through
  `record_call` so a replay can answer it from the record (and through the
  rate governor, `governing`, with the budget left as its priority); checks the reply
  (bounded format retries, the error shown to the model); counts turns,
  tokens, cost and time against the `Budget`; and either leaves tool calls in
  ``pending`` or records the final answer and why the agent finished.
- `ActStage` (Acting → Thinking) runs the pending tool calls concurrently
  (bounded) and appends their results to ``messages`` in call order; with a
  toolbox whose calls a human may have to decide on, it may hold one instead
  (Acting → Acting, paused at the ``"tool call"`` gate: see ``_guard``).
"""

from __future__ import annotations

import contextlib
import functools
import time
import types
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from .. import _tracing
from .._errors import Fatal, MalformedModelOutput, Recoverable
from .._hooks import current_injector, current_session, current_step, record_plain_call
from .._log import get_logger
from ..models import current_priority, governing, rate_priority
from ..protocols import (
    Lifecycle,
    Message,
    ModelReply,
    Patch,
    ReplyDelta,
    Stage,
    StreamingModelClient,
    SystemMessage,
    ToolMessage,
    Usage,
    UserMessage,
    emit,
    record_call,
    record_stream,
)
from ..protocols._seams import share_fields_set
from ..tools import Toolbox
from ._budget import Used
from ._calls import answer_data, check_reply, tail, unwrap
from ._context import ContextWindow
from ._guard import act_guarded
from ._options import checked_turn, rounds_exhausted
from ._state import ReactState, StopReason

if TYPE_CHECKING:
    import enum
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
    from typing import Self

    from ..protocols import StateView, ToolCall, ToolSpec
    from ._config import ReactConfig

__all__ = ["ActStage", "ReactStage", "StartStage", "ThinkStage"]

L = Lifecycle
_log = get_logger("arkhon_rheo.react")

#: A call's rate priority without a budget (the whole of it left).
DEFAULT_PRIORITY = 1.0


class ReactStage(Stage[ReactState]):
    """A stage of the engine; `bind` makes the class a machine's stages are instances of."""

    config: ClassVar[ReactConfig]

    @classmethod
    def bind(cls, config: ReactConfig) -> type[Self]:
        """A subclass of this stage reading its settings from ``config``."""
        namespace = {"config": config, "__module__": cls.__module__, "__doc__": cls.__doc__}
        return types.new_class(
            cls.__name__, (cls,), {"name": cls.name}, lambda ns: ns.update(namespace)
        )


@functools.lru_cache(maxsize=256)
def _system_message(prompt: str) -> SystemMessage:
    """One frozen message per system prompt, shared by the sessions of every agent using it."""
    return SystemMessage(content=prompt)


class StartStage(ReactStage, name="start", reads={"task", "messages"}, writes={"messages"}):
    """Open the conversation: the system prompt, then the task."""

    async def execute(self, view: StateView[ReactState]) -> Patch:
        """The opening messages, unless the caller gave a conversation."""
        if len(view.messages):
            return Patch()  # a conversation given by the caller: keep it as it is
        opening: list[Message] = []
        if view.task:
            opening.append(UserMessage(content=view.task))
        elif not self.config.conversational:
            raise Fatal("nothing to do: start the agent with ReactState(task='...')")
        system_prompt = self.config.system_prompt
        if system_prompt is not None:
            opening.insert(0, _system_message(system_prompt))
        return Patch().append("messages", *opening)

    def next(self, state: ReactState) -> enum.Enum:
        """Think next; a conversation opened without a task waits for its first message."""
        if self.config.conversational and not state.task:
            return L.OBSERVING
        return L.THINKING


class ThinkStage(
    ReactStage,
    name="think",
    reads={
        "messages",
        "turns",
        "tool_calls",
        "usage",
        "cost",
        "started_at",
        "elapsed",
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
        "output",
        "exit",
        "pending_step",
    },
):
    """One model turn: ask, check the reply (retrying its format), count what it used."""

    #: The session's conversation as estimated so far, for ``max_context_tokens``
    #: (made at the first trim: one per session, as the stage is).
    window: ContextWindow | None = None

    async def execute(self, view: StateView[ReactState]) -> Patch:
        """The turn's messages and counters, and its tool calls or the final answer."""
        config = self.config
        if view.stop:
            return Patch(exit=StopReason.STOPPED)
        # Each field read once (a read through the view is a lookup in Python).
        turns, usage, cost, started_at = view.turns, view.usage, view.cost, view.started_at
        if turns >= config.max_steps:
            _log.warning("react_max_steps", turns=turns, max_steps=config.max_steps)
            return Patch(exit=StopReason.MAX_STEPS)
        before = (usage, cost, started_at, view.elapsed)
        started, elapsed = started_at, 0.0
        if config.timed:  # the clock is read (and recorded, for replay) only when time is limited
            now = await record_call("clock", {"turn": turns}, _now, returns=float)
            started = now if started is None else started
            elapsed = max(0.0, now - started)
        wrapup, new = self._budget_check(view, elapsed)
        new_wrapup = bool(new)  # the notice is sent when (and only when) the turn becomes it
        offered, lines = checked_turn(config.checks, config.runner.specs, view, wrapup)
        problem = ""
        limited = config.limited
        for attempt in range(config.max_format_retries + 1):
            # What is used is counted for the budget line and the rate priority, with a budget.
            used = (
                Used(turns, view.tool_calls, usage.total_tokens, cost, elapsed) if limited else None
            )
            reply = await self._turn(
                view.messages, new, turns, used, wrapup, offered, attempt, lines
            )
            turns += 1
            usage = _added(usage, reply.usage)
            if config.pricing is not None:
                cost += config.pricing.cost(reply.usage, reply.model)
            new.append(reply.message)
            problem, feedback = check_reply(reply, wrapup, config.answer_adapter)
            if not problem:
                break
            _log.info("react_format_retry", attempt=attempt + 1, problem=problem)
            new.extend(feedback)
        else:
            raise MalformedModelOutput(problem, retries=config.max_format_retries)
        patch = Patch(turns=turns, **_changed(before, (usage, cost, started, elapsed)))
        if new_wrapup:
            patch = patch.set(wrapup=True)
        patch = patch.append("messages", *new)
        if reply.tool_calls:  # their idempotency keys are made from this step's number
            return patch.set(pending=reply.tool_calls, pending_step=current_step())
        exit_reason = StopReason.BUDGET_EXHAUSTED if wrapup else StopReason.ANSWERED
        output = answer_data(reply.text, config.answer_adapter)
        return patch.set(pending=(), answer=reply.text, output=output, exit=exit_reason)

    def next(self, state: ReactState) -> enum.Enum:
        """Act on the tool calls; with an exit reason, finish (or, conversational, wait)."""
        if state.exit is None:
            return L.ACTING
        return L.OBSERVING if self.config.conversational else L.FINISHED

    def _budget_check(
        self, view: StateView[ReactState], elapsed: float
    ) -> tuple[bool, list[Message]]:
        """Whether this is the wrap-up turn, and the message that tells the model it became one."""
        if view.wrapup:
            return True, []
        config = self.config
        if not config.limited and config.checks is None:
            return False, []  # no limit to reach
        used = Used(view.turns, view.tool_calls, view.usage.total_tokens, view.cost, elapsed)
        reason = config.limits.exhausted(used) or rounds_exhausted(config.checks, view)
        if reason is None:
            return False, []
        notice = (
            f"Budget reached ({reason}). Give your final answer now, in text; "
            "no tools are available."
        )
        return True, [UserMessage(content=notice)]

    def _turn(
        self,
        messages: Sequence[Message],
        new: Sequence[Message],
        turns: int,
        used: Used | None,
        wrapup: bool,
        offered: Sequence[ToolSpec],
        attempt: int,
        lines: Sequence[str] = (),
    ) -> Awaitable[ModelReply]:
        """Ask the model once, under its span: the conversation trimmed, with the budget line.

        Returns the call to await (no coroutine of its own around it: a frame
        less per turn when no span is opened and the priority stays).
        """
        config = self.config
        conversation: tuple[Message, ...] = (*messages, *new)
        budget = config.limits.render(used, wrapup=wrapup) if used is not None else ""
        line = "\n".join(x for x in (budget, *lines) if x) if budget or lines else ""
        payload = conversation
        if config.max_context_tokens is not None:
            if self.window is None:
                self.window = ContextWindow()
            payload = self.window.trim(conversation, config.max_context_tokens)
        if line:
            payload = (*payload, SystemMessage(content=line))
        dumped, plain = tail(conversation)
        request = {
            "turn": turns,
            "attempt": attempt,
            "new": dumped,
            "tools": [spec.name for spec in offered],
            "budget": line,
        }
        # Its place when a rate governor queues it: the budget left (the whole of it: 1.0).
        priority = config.limits.left(used) if used is not None else DEFAULT_PRIORITY
        scope = _tracing.model_call(config.trace_system, config.trace_model)
        if scope is _tracing.NOTHING and current_priority() == priority:
            return self._call(request, payload, offered, plain)  # no span, no new priority
        return self._traced(scope, priority, request, payload, offered, plain)

    async def _traced(
        self,
        scope: contextlib.AbstractContextManager[Any],
        priority: float,
        request: Any,
        payload: Sequence[Message],
        offered: Sequence[ToolSpec],
        plain: bool,
    ) -> ModelReply:
        """`_call` under the model call's span and with the turn's rate priority."""
        with (
            scope as span,
            rate_priority(priority) if current_priority() != priority else contextlib.nullcontext(),
        ):
            reply = await self._call(request, payload, offered, plain)
            _tracing.model_reply(
                span,
                reply.model,
                reply.usage.prompt_tokens,
                reply.usage.completion_tokens,
                reply.finish_reason,
            )
        return reply

    def _call(
        self, request: Any, payload: Sequence[Message], offered: Sequence[ToolSpec], plain: bool
    ) -> Awaitable[ModelReply]:
        """The model's reply, recorded (a request made here of plain data as it is, not copied).

        The awaitable itself, not a coroutine around it: one frame less per turn.
        """
        if self.config.stream:
            return self._stream(request, payload, offered)
        config = self.config
        ask: Callable[[], Awaitable[ModelReply]]
        if config.cache is None and current_injector() is None:  # the model itself, directly
            model = governing(config.model)
            ask = functools.partial(
                model.complete,
                payload,
                tools=offered,
                json_mode=config.ask_json,
                **config.model_options,
            )
        else:
            ask = functools.partial(self._ask, payload, offered)
        record = record_plain_call if plain else record_call
        return record("model", request, ask, returns=ModelReply)

    async def _ask(self, payload: Sequence[Message], offered: Sequence[ToolSpec]) -> ModelReply:
        """The model's reply (or the prompt cache's), under the fault plan if one is installed."""
        config = self.config
        model, cache, ask_json = governing(config.model), config.cache, config.ask_json
        more = config.model_options
        key = ""
        if cache is not None:
            key = cache.key(payload, offered, ask_json, config.answer_schema)
            hit = cache.get(key)
            if hit is not None:
                return hit
        if current_injector() is None:
            reply = await model.complete(payload, tools=offered, json_mode=ask_json, **more)
        else:  # the model seam of fault injection
            alter = await _inject_model(len(payload))
            reply = await model.complete(payload, tools=offered, json_mode=ask_json, **more)
            if alter is not None:
                reply = alter(reply)
        if cache is not None:
            cache.put(key, reply)
        return reply

    async def _stream(
        self, request: Any, payload: Sequence[Message], offered: Sequence[ToolSpec]
    ) -> ModelReply:
        """The model's streamed reply: its text pieces emitted, its chunks recorded."""
        model, ask_json = governing(self.config.model), self.config.ask_json
        more = self.config.model_options
        assert isinstance(model, StreamingModelClient)
        final: ModelReply | None = None
        chunks = record_stream(
            "model",
            request,
            lambda: (
                model.stream(payload, tools=offered, json_mode=ask_json, **more)
                if current_injector() is None
                else _faulted_stream(model, payload, offered, ask_json, more)
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


class ActStage(
    ReactStage,
    name="act",
    reads={"pending", "tool_calls", "pending_step", "held", "approval", "approved"},
    writes={"messages", "pending", "tool_calls", "held", "approval", "approved"},
):
    """Run the pending tool calls, at most ``max_parallel_tools`` at once (or hold one)."""

    async def execute(self, view: StateView[ReactState]) -> Patch:
        """The calls' results, appended in call order; or the call held for a human."""
        calls = view.pending
        runner = self.config.runner
        call: Callable[[ToolCall], Awaitable[ToolMessage]] = runner.call
        if isinstance(runner, Toolbox):
            failures = self.config.tool_failures
            if runner.may_hold:
                return await act_guarded(view, runner, self.config.max_parallel_tools, failures)
            step = view.pending_step
            if len(calls) == 1:  # the common case, called directly
                result = await runner.call(calls[0], step=step, on_exhausted=failures)
                share_fields_set(result)  # kept in the conversation for the session's life
                return Patch(pending=(), tool_calls=view.tool_calls + 1).append("messages", result)
            call = functools.partial(runner.call, step=step, on_exhausted=failures)
        if len(calls) == 1:  # the common case: no task group needed
            result = await call(calls[0])
            share_fields_set(result)  # kept in the conversation for the session's life
            return Patch(pending=(), tool_calls=view.tool_calls + 1).append("messages", result)
        results: list[ToolMessage | None] = [None] * len(calls)
        limiter = anyio.CapacityLimiter(self.config.max_parallel_tools)

        async def run(index: int, one: ToolCall) -> None:
            async with limiter:
                results[index] = await call(one)

        try:
            async with anyio.create_task_group() as group:
                for index, one in enumerate(calls):
                    group.start_soon(run, index, one)
        except BaseExceptionGroup as errors:
            raise unwrap(errors) from None
        done = [result for result in results if result is not None]
        for result in done:
            share_fields_set(result)
        return Patch(pending=(), tool_calls=view.tool_calls + len(calls)).append("messages", *done)

    def next(self, state: ReactState) -> enum.Enum:
        """Think again; with a call held for a human, act again (after the gate)."""
        return L.THINKING if state.held is None else L.ACTING


def _changed(before: tuple[Any, ...], after: tuple[Any, ...]) -> dict[str, Any]:
    """The turn's counters that changed: a patch writes only those (the state is the same).

    ``before`` and ``after`` are ``(usage, cost, started_at, elapsed)``. A model
    that reports no usage, an agent without prices or a time limit, leave them
    as they were; each field left out is one less value validated, recorded
    and copied into the next state at every turn.
    """
    return {
        name: new
        for name, old, new in zip(_COUNTERS, before, after, strict=True)
        if new is not old and new != old
    }


#: The counters a turn may change, in `_changed`'s order.
_COUNTERS = ("usage", "cost", "started_at", "elapsed")


def _added(usage: Usage, more: Usage) -> Usage:
    """``usage + more``, kept in the session's log as in its state.

    ``usage`` itself when ``more`` counts nothing (a model that reports no
    usage); else the sum, sharing its set of fields set (`share_fields_set`).
    """
    if not (
        more.prompt_tokens
        or more.completion_tokens
        or more.cache_read_tokens
        or more.cache_creation_tokens
    ):
        return usage
    total = usage + more
    share_fields_set(total)
    return total


async def _now() -> float:
    return time.time()


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
    more: Mapping[str, Any],
) -> AsyncIterator[ReplyDelta | ModelReply]:
    """A model stream under an installed fault plan: its fault acted out, its reply altered."""
    alter = await _inject_model(len(payload))
    async for chunk in model.stream(payload, tools=offered, json_mode=json_mode, **more):
        yield alter(chunk) if alter is not None and isinstance(chunk, ModelReply) else chunk
