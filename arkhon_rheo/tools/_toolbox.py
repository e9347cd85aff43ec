"""`Toolbox`: the tools of an agent, answering the model's tool calls (a `ToolRunner`).

One call goes one way through: parse the arguments, record the call
(`record_call`, so a replay answers it from the record), find the tool,
validate, apply its run policy (blocked, or held for a human's approval),
wait for the tool's and the toolbox's capacity, run: through the session's
effect ledger for a tool with side effects (`._effects.run_once`). Whatever
the model did wrong, and whatever the tool raised of its own, comes back as an
error `ToolMessage` for the model to act on. A `Transient` failure (including
`ToolTimeout`) is retried within the call and then observed, or escalates, by
the tool's ``on_exhausted``; the other classified errors
(`Recoverable`, `Fatal`, including `ToolCallHeld` and `AmbiguousEffect`)
propagate to the supervisor, which restarts or fails the stage (a ReAct agent
pauses on `ToolCallHeld`).
"""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
from pydantic import ValidationError

from .. import _tracing
from .._errors import (
    ArkhonError,
    ConfigurationError,
    ToolError,
    Transient,
)
from .._hooks import call_site, current_injector, current_session
from .._log import get_logger
from .._redact import scrub, scrub_secrets
from ..protocols import ToolCall, ToolMessage, ToolSpec, record_call
from ._context import tool_context
from ._effects import Effect, Ledger, RunPolicy, idempotency_key, policy_of, refused_by, run_once
from ._retry import ESCALATE, OnExhausted, backoff_delay, observes, on_exhausted_of
from ._tool import Tool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

    from pydantic import BaseModel

    from ..protocols import Store

__all__ = ["Toolbox", "ToolboxStatistics"]

_MAX_INPUT_SHOWN = 80
_log = get_logger("arkhon_rheo.tools")


@dataclass(frozen=True, slots=True)
class ToolboxStatistics:
    """A snapshot of a toolbox's activity (`Toolbox.statistics`).

    Attributes:
        calls: Calls answered with a `ToolMessage`, errors included.
        errors: Calls answered with an error message.
        raised: Calls that raised (a classified failure or a cancellation).
        in_flight: Calls running a tool now.
        waiting: Calls waiting for a tool's or the toolbox's capacity now.
        retries: Attempts made again after a transient failure, within calls.
        exhausted: Calls answered ``"Error after N attempts"`` (their retries used up).
    """

    calls: int
    errors: int
    raised: int
    in_flight: int
    waiting: int
    retries: int = 0
    exhausted: int = 0


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: Parses a call's arguments (NaN and infinities refused): made once, not per call
#: (``json.loads`` with an option makes a decoder, and its scanner, each time).
_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


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
        policies: Run policies by tool name (`RunPolicy`, or its value), over
            the tools' own (``@tool(run=...)``): a deployment's choice, say
            ``{"send_email": "approve", "delete_account": "block"}``.

    Raises:
        ConfigurationError: Two tools have the same name, an argument is not a
            `Tool`, ``concurrency`` is not a positive int, or ``policies`` names
            a tool the toolbox lacks or a policy that is not one.
    """

    def __init__(
        self,
        *tools: Tool[..., Any],
        concurrency: int | None = None,
        policies: Mapping[str, RunPolicy | str] | None = None,
    ) -> None:
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
        self._policies = {one.name: one.run_policy for one in tools}
        for name, policy in (policies or {}).items():
            if name not in self._tools:
                raise ConfigurationError(
                    f"Toolbox policies name {name!r}, which is not one of its tools "
                    f"({', '.join(self._tools) or 'none'})"
                )
            self._policies[name] = policy_of(policy, tool=name)
        blocked = RunPolicy.BLOCK
        self._specs = tuple(one.spec for one in tools if self._policies[one.name] is not blocked)
        #: Whether a call may be held for a human (a tool to approve, or to ask about).
        self.may_hold = any(
            self._policies[one.name] is RunPolicy.APPROVE or one.effect is Effect.ASK
            for one in tools
        )
        self._limiters = {
            one.name: anyio.CapacityLimiter(one.concurrency)
            for one in tools
            if one.concurrency is not None
        }
        self._limiter = anyio.CapacityLimiter(concurrency) if concurrency is not None else None
        self._calls = self._errors = self._raised = self._in_flight = self._waiting = 0
        self._retries = self._exhausted = 0

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
        """The tools as the model sees them, in the order given (blocked ones left out)."""
        return self._specs

    def policy(self, name: str) -> RunPolicy:
        """The run policy of tool ``name`` here (``ALLOW`` for a tool it lacks)."""
        return self._policies.get(name, RunPolicy.ALLOW)

    def argument_problems(self, name: str, arguments: Mapping[str, Any]) -> str:
        """What is wrong with ``arguments`` for tool ``name`` (``""``: nothing, or no such tool)."""
        if name in self:
            try:
                self[name].validate(arguments)
            except ValidationError as exc:
                return _compact(exc)
        return ""

    def statistics(self) -> ToolboxStatistics:
        """How many calls were answered, failed, and are running or waiting now."""
        return ToolboxStatistics(
            calls=self._calls,
            errors=self._errors,
            raised=self._raised,
            in_flight=self._in_flight,
            waiting=self._waiting,
            retries=self._retries,
            exhausted=self._exhausted,
        )

    async def call(
        self,
        call: ToolCall,
        *,
        step: int | None = None,
        approved: bool = False,
        rerun: int = 0,
        on_exhausted: OnExhausted = ESCALATE,
    ) -> ToolMessage:
        """Answer one tool call; recorded as ``"tool:<name>"`` when made inside a stage.

        The record's request is ``{"name", "arguments"}`` with the arguments
        as parsed JSON (their raw text when they are not JSON), and
        ``"approved"`` or ``"rerun"`` when given; its response is the
        `ToolMessage`. A replay answers from the record without running the tool.

        A call of a tool with side effects (see `Effect`) made in a stage of a
        session kept in a store runs through the session's effect ledger: its
        intent is committed first, its answer once it returns, and a call the
        ledger has an answer for is answered from it, never run again.

        Args:
            call: The model's call.
            step: The step that asked for the call, for its idempotency key (the
                running step's by default; a resume runs a step again under a new
                number, so a stage whose calls must keep their keys across one
                passes the number of the step that asked for them, as the ReAct
                engine does).
            approved: A human approved the call (its tool's run policy is ``approve``).
            rerun: A human let a call that started and never finished run again,
                when it had been begun this many times (0: no one did). Spent once
                it runs: if that run is cut short too, a human is asked again.
            on_exhausted: For a tool that does not say, what a transient failure
                gets: ``"escalate"`` (raised, for the supervisor) or ``"observe"``
                (retried, then answered ``"Error after N attempts: ..."``).

        Returns:
            The result, or an error message (``is_error=True``) for an unknown
                or blocked tool, arguments that are not JSON or do not validate, an
                exception the tool raised of its own, and a transient failure past
                its retries, when it is observed.

        Raises:
            Transient: The tool raised it, or ran past its timeout (`ToolTimeout`),
                and it escalates.
            Recoverable: The tool raised it.
            Fatal: The tool raised it; or `ToolCallHeld`: the call waits for a
                human (its tool's run policy is ``approve``, or its effect is
                ``ask`` and it started and never finished); or `AmbiguousEffect`:
                it started and never finished, and its tool's effect is ``fail``.
        """
        text, arguments, request = _request(call, approved, rerun)
        # Read here: inside the recorded call, the stage's recorder is out of sight.
        sid, running, store = call_site()
        exhausted = on_exhausted_of(on_exhausted, tool=None)
        site = _Site(
            call, sid, running if step is None else step, store, approved, rerun, exhausted
        )
        try:
            with _tracing.tool_call(call.name, call.id):
                message: ToolMessage = await record_call(
                    f"tool:{call.name}",
                    request,
                    lambda: self._answer(site, text, arguments),
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

    async def _answer(self, site: _Site, text: str, arguments: Any) -> ToolMessage:
        call = site.call
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
        refused = refused_by(self._policies[tool.name], call, approved=site.approved)
        if refused is not None:
            return self._error(call, refused)
        if tool.effect is Effect.READ and not tool.takes_context:
            try:  # the common case first: no context, no ledger, one attempt that answers
                return await self._run(tool, call, arguments, validated, None)
            except Transient as exc:
                if not _observed(tool, site, exc):
                    raise
                again = functools.partial(self._run, tool, call, arguments, validated, None)
                return await self._retry(tool, site, again, exc)
        sid, step, store = site.session_id, site.step, site.store
        key = idempotency_key(sid, step, call.id) if sid and step is not None and call.id else None
        context = tool_context(call.id, key) if tool.takes_context else None
        attempt = functools.partial(self._run, tool, call, arguments, validated, context)
        if tool.effect is not Effect.READ and store is not None and key is not None:
            run, ledger = attempt, Ledger(store, sid, key)
            attempt = functools.partial(
                run_once, ledger, call, tool.effect, arguments, run, rerun=site.rerun
            )
        try:
            return await attempt()
        except Transient as exc:
            if not _observed(tool, site, exc):
                raise
            return await self._retry(tool, site, attempt, exc)

    async def _retry(
        self,
        tool: Tool[..., Any],
        site: _Site,
        attempt: Callable[[], Awaitable[ToolMessage]],
        failure: Transient,
    ) -> ToolMessage:
        """Try a call that failed transiently again, up to its tool's retries; then observe it.

        Each attempt waits a backoff first. A failure that is not to be observed
        (see `_observed`: a timeout of a side-effecting tool) propagates.

        Returns:
            The answer of the first attempt that gives one, or the error result
            ``"Error after N attempts: <the last failure>"``.
        """
        attempts = tool.retries + 1
        for number in range(1, attempts):
            self._retries += 1
            delay = backoff_delay(number, failure.retry_after)
            _log.info(
                "tool_retrying",
                tool=tool.name,
                attempt=number + 1,
                delay=delay,
                error=scrub(repr(failure)),
            )
            await anyio.sleep(delay)
            try:
                return await attempt()
            except Transient as exc:
                if not _observed(tool, site, exc):
                    raise
                failure = exc
        return self._exhausted_answer(site.call, attempts, failure)

    def _exhausted_answer(self, call: ToolCall, attempts: int, failure: Transient) -> ToolMessage:
        """The error result of a call that failed transiently ``attempts`` times, to be observed."""
        self._exhausted += 1
        message = scrub(str(failure) or type(failure).__name__)
        _log.warning("tool_exhausted", tool=call.name, attempts=attempts, error=message)
        plural = "s" if attempts != 1 else ""
        return self._error(call, f"Error after {attempts} attempt{plural}: {message}")

    async def _run(
        self,
        tool: Tool[..., Any],
        call: ToolCall,
        arguments: Any,
        validated: BaseModel,
        context: Any,
    ) -> ToolMessage:
        """Run the tool within capacity; its own errors become an error message."""
        try:
            if self._limiter is None and call.name not in self._limiters:
                # No capacity to wait for: counted in flight, with no scope entered.
                self._in_flight += 1
                try:
                    if current_injector() is not None:
                        await _inject(call.name, arguments)
                    content = await tool.run(validated, context)
                finally:
                    self._in_flight -= 1
            else:
                async with self._capacity(call.name):
                    if current_injector() is not None:
                        await _inject(call.name, arguments)
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
        """The error result of ``call``, its text scrubbed of the registered secrets.

        A tool's error may quote its own key (registered with
        ``AgentSystem(redact=...)``): masked before the model, the session's
        state or the store gets it.
        """
        content = scrub_secrets(content)
        return ToolMessage(tool_call_id=call.id, name=call.name, content=content, is_error=True)


def _request(call: ToolCall, approved: bool, rerun: int) -> tuple[str, Any, dict[str, Any]]:
    """A call's arguments as text and as JSON (the text if not JSON), and its record's request."""
    text = call.arguments.strip() or "{}"
    arguments: Any
    try:
        arguments = _decode(text)
    except ValueError:
        arguments = call.arguments
    request: dict[str, Any] = {"name": call.name, "arguments": arguments}
    if approved:
        request["approved"] = True
    if rerun:
        request["rerun"] = rerun
    return text, arguments, request


def _observed(tool: Tool[..., Any], site: _Site, failure: Transient) -> bool:
    """Whether a transient failure of a call is retried and then observed, or escalates.

    By the tool's ``on_exhausted``, else the call's. A timeout of a tool with
    side effects always escalates: its effect may have happened, so it is never
    turned into an error result (the model could call again, under a new key);
    the effect ledger decides on the next attempt (see ``_retry``).
    """
    return observes(tool.on_exhausted or site.on_exhausted, tool.effect, failure)


class _Site(NamedTuple):
    """One call as `Toolbox.call` was asked to make it (a tuple: made for every call)."""

    call: ToolCall
    #: The session making it ("" outside one), the step its key is made from, and
    #: the store of the session's effect ledger (``None`` without one, or in a replay).
    session_id: str
    step: int | None
    store: Store | None
    approved: bool
    rerun: int
    #: What a transient failure past its retries gets, for a tool that does not say.
    on_exhausted: OnExhausted


async def _inject(name: str, arguments: Any) -> None:
    """The tool seam of fault injection: act out the installed plan's fault, if any."""
    injector = current_injector()
    if injector is not None:
        await injector.inject(f"tool:{name}", current_session(), {"arguments": arguments})
