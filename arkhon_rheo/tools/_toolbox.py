"""`Toolbox`: the tools of an agent, answering the model's tool calls (a `ToolRunner`).

One call goes one way through: parse the arguments, record the call
(`record_call`, so a replay answers it from the record), find the tool,
validate, wait for the tool's and the toolbox's capacity, run. Whatever the
model did wrong, and whatever the tool raised of its own, comes back as an
error `ToolMessage` for the model to act on; the library's classified errors
(`Transient`, including `ToolTimeout`, `Recoverable`, `Fatal`) propagate to
the supervisor, which retries, restarts or fails the stage.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from .. import _tracing
from .._errors import ArkhonError, ConfigurationError, ToolError
from ..protocols import ToolCall, ToolMessage, ToolSpec, record_call
from ..protocols._seams import current_injector, current_session
from ._context import tool_context
from ._tool import Tool

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["Toolbox", "ToolboxStatistics"]

_MAX_INPUT_SHOWN = 80


@dataclass(frozen=True, slots=True)
class ToolboxStatistics:
    """A snapshot of a toolbox's activity (`Toolbox.statistics`).

    Attributes:
        calls: Calls answered with a `ToolMessage`, errors included.
        errors: Calls answered with an error message.
        raised: Calls that raised (a classified failure or a cancellation).
        in_flight: Calls running a tool now.
        waiting: Calls waiting for a tool's or the toolbox's capacity now.
    """

    calls: int
    errors: int
    raised: int
    in_flight: int
    waiting: int


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _compact(exc: ValidationError) -> str:
    """Pydantic's errors, one short clause each: ``where: what (got ...)``."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        clause = f"{where}: {error['msg']}"
        if error["type"] not in ("missing", "extra_forbidden") and "input" in error:
            shown = repr(error["input"])
            if len(shown) > _MAX_INPUT_SHOWN:
                shown = shown[: _MAX_INPUT_SHOWN - 3] + "..."
            clause += f" (got {shown})"
        elif error["type"] == "extra_forbidden":
            clause = f"{where}: not a parameter of this tool"
        parts.append(clause)
    return "; ".join(parts)


class Toolbox:
    """The tools an agent may call; implements `arkhon_rheo.protocols.ToolRunner`.

    One toolbox is meant to be shared by every session of a system: each tool's
    ``concurrency`` and the toolbox's own ``concurrency`` bound the calls
    running at once across all of them (an `anyio.CapacityLimiter` each; a
    call takes its tool's slot first, then the toolbox's, so calls queued for
    a busy tool do not hold the toolbox's slots). Use a toolbox under one
    event loop backend only.

    Args:
        *tools: The tools, made with `tool`; `specs` keeps their order.
        concurrency: How many calls may run at once in all, or ``None``.

    Raises:
        ConfigurationError: Two tools have the same name, an argument is not a
            `Tool`, or ``concurrency`` is not a positive int.
    """

    def __init__(self, *tools: Tool[..., Any], concurrency: int | None = None) -> None:
        self._tools: dict[str, Tool[..., Any]] = {}
        for one in tools:
            if not isinstance(one, Tool):
                raise ConfigurationError(
                    f"Toolbox takes tools made with @tool, got {one!r}; decorate the function"
                )
            other = self._tools.get(one.name)
            if other is not None:
                raise ConfigurationError(
                    f"two tools are named {one.name!r}: {other.target} and {one.target}; "
                    "rename one with @tool(name=...)"
                )
            self._tools[one.name] = one
        if concurrency is not None and (isinstance(concurrency, bool) or concurrency < 1):
            raise ConfigurationError(
                f"Toolbox concurrency must be an int >= 1 or None, got {concurrency!r}"
            )
        self._specs = tuple(one.spec for one in tools)
        self._limiters = {
            one.name: anyio.CapacityLimiter(one.concurrency)
            for one in tools
            if one.concurrency is not None
        }
        self._limiter = anyio.CapacityLimiter(concurrency) if concurrency is not None else None
        self._calls = self._errors = self._raised = self._in_flight = self._waiting = 0

    def __repr__(self) -> str:
        return f"<Toolbox {', '.join(self._tools) or '(empty)'}>"

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool[..., Any]]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool[..., Any]:
        """The tool called ``name``.

        Raises:
            KeyError: No tool has that name.
        """
        return self._tools[name]

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The tools as the model sees them, in the order they were given."""
        return self._specs

    def statistics(self) -> ToolboxStatistics:
        """How many calls were answered, failed, and are running or waiting now."""
        return ToolboxStatistics(
            calls=self._calls,
            errors=self._errors,
            raised=self._raised,
            in_flight=self._in_flight,
            waiting=self._waiting,
        )

    async def call(self, call: ToolCall) -> ToolMessage:
        """Answer one tool call; recorded as ``"tool:<name>"`` when made inside a stage.

        The record's request is ``{"name", "arguments"}`` with the arguments
        as parsed JSON (their raw text when they are not JSON); its response
        is the `ToolMessage`. A replay answers from the record without running
        the tool.

        Returns:
            The result, or an error message (``is_error=True``) for an unknown
            tool, arguments that are not JSON or do not validate, and an
            exception the tool raised of its own.

        Raises:
            Transient: The tool raised it, or ran past its timeout (`ToolTimeout`).
            Recoverable: The tool raised it.
            Fatal: The tool raised it.
        """
        text = call.arguments.strip() or "{}"
        arguments: Any
        try:
            arguments = json.loads(text, parse_constant=_reject_constant)
        except ValueError:
            arguments = call.arguments
        request = {"name": call.name, "arguments": arguments}
        try:
            with _tracing.tool_call(call.name, call.id):
                message: ToolMessage = await record_call(
                    f"tool:{call.name}",
                    request,
                    lambda: self._answer(call, text, arguments),
                    returns=ToolMessage,
                )
        except BaseException:
            self._raised += 1
            raise
        self._calls += 1
        self._errors += message.is_error
        if message.tool_call_id != call.id:  # answered from a record made under another id
            message = message.model_copy(update={"tool_call_id": call.id})
        return message

    async def _answer(self, call: ToolCall, text: str, arguments: Any) -> ToolMessage:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return self._error(call, f"unknown tool {call.name!r}; the tools are: {known}")
        if isinstance(arguments, str):
            return self._error(
                call,
                f"the arguments of {call.name!r} are not JSON ({arguments[:_MAX_INPUT_SHOWN]!r}); "
                "send a JSON object with the tool's parameters",
            )
        try:
            validated = tool.validate(text)
        except ValidationError as exc:
            return self._error(
                call,
                f"invalid arguments for {call.name!r}: {_compact(exc)}; call it again with "
                "arguments that match its parameters",
            )
        try:
            async with self._capacity(call.name):
                if current_injector() is not None:
                    await _inject(call.name, arguments)
                context = tool_context(call.id) if tool.takes_context else None
                content = await tool.run(validated, context)
        except ToolError as exc:
            return self._error(call, str(exc))
        except ArkhonError:
            raise  # classified failures (and the library's own errors) are the supervisor's
        except Exception as exc:
            return self._error(call, f"{type(exc).__name__}: {exc}")
        return ToolMessage(tool_call_id=call.id, name=call.name, content=content)

    @contextlib.asynccontextmanager
    async def _capacity(self, name: str) -> Any:
        limiters = [self._limiters.get(name), self._limiter]
        async with contextlib.AsyncExitStack() as stack:
            self._waiting += 1
            try:
                for limiter in limiters:
                    if limiter is not None:
                        await stack.enter_async_context(limiter)
            finally:
                self._waiting -= 1
            self._in_flight += 1
            try:
                yield
            finally:
                self._in_flight -= 1

    @staticmethod
    def _error(call: ToolCall, content: str) -> ToolMessage:
        return ToolMessage(tool_call_id=call.id, name=call.name, content=content, is_error=True)


async def _inject(name: str, arguments: Any) -> None:
    """The tool seam of fault injection: act out the installed plan's fault, if any."""
    injector = current_injector()
    if injector is not None:
        await injector.inject(f"tool:{name}", current_session(), {"arguments": arguments})
