"""The `tool` decorator: a typed function becomes a `Tool` the model can call.

The function's parameters become a pydantic model (``Tool.arguments``) that
validates what the model sends, and a JSON schema in the chat-completions
tool format (``Tool.spec``). The docstring's first paragraph is the tool's
description; the lines of a Google-style ``Args:`` section describe the
parameters. A parameter annotated `ToolContext` is not one of them: the
`Toolbox` passes the call's context there.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import typing
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticSerializationError, to_json

from .._errors import ConfigurationError, ToolError, ToolTimeout
from ..protocols import ToolSpec
from ._context import ToolContext, is_context, tool_context
from ._effects import Effect, RunPolicy, effect_of, policy_of
from ._retry import on_exhausted_of, retries_of
from ._sandbox import run_sandboxed

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic_core import CoreSchema

    from ._config import Sandbox
    from ._retry import OnExhausted

__all__ = ["SANDBOX_TIMEOUT", "Tool", "result_text", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

SANDBOX_TIMEOUT = 30.0
"""The timeout of a sandboxed tool that declares none, in seconds."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class _Schema(GenerateJsonSchema):
    """Pydantic's JSON schema without a title on every field: the model does not need them."""

    def field_title_should_be_set(self, schema: CoreSchema | Any) -> bool:
        return False


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph of a docstring, and its ``Args:`` lines by parameter."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    in_args = False
    current: str | None = None
    described_indent = 0
    for line in lines:
        if _SECTION.match(line) and not line.startswith(" "):
            in_args = line.strip() in ("Args:", "Arguments:", "Parameters:")
            current = None
            continue
        if not in_args or not line.strip():
            continue
        if not line.startswith(" "):
            in_args = False  # an unindented line ends the section
            continue
        body = line.strip()
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(body)
        if match and (current is None or indent <= described_indent):
            current, described_indent = match[1], indent
            described[current] = match[2].strip()
        elif current is not None:
            described[current] = f"{described[current]} {body}".strip()
    return " ".join(summary), described


def _field_name(parameter: str) -> str:
    """A field name for ``parameter`` that cannot shadow a `BaseModel` attribute."""
    if parameter.startswith("model_") or hasattr(BaseModel, parameter):
        return f"arg_{parameter}"
    return parameter


class Tool(Generic[P, R]):
    """A function the model may call, with the model of its arguments and its spec.

    Made with `tool`; calling the `Tool` calls the function as it is (handy in
    tests). A `Toolbox` runs it for the model: `validate` the arguments, then
    `run`.

    Attributes:
        fn: The decorated function.
        name: The name the model calls it by.
        description: What it does, for the model.
        arguments: The pydantic model of its arguments (fields by parameter
            name, or ``arg_<name>`` with the parameter's name as alias when the
            name would shadow a `BaseModel` attribute).
        spec: Name, description and JSON schema of the arguments, for the model.
        timeout: Seconds a call may run before `ToolTimeout`; ``None`` for no limit.
        concurrency: How many calls may run at once in one `Toolbox`; ``None``
            for no limit of its own.
        thread: Whether a synchronous function runs in a worker thread.
        sandbox: Where it runs in a subprocess, if it does.
        target: ``"module:qualname"`` of the function (how a sandbox imports it).
        takes_context: Whether the function declares a `ToolContext` parameter
            (left out of ``arguments`` and ``spec``; passed on each call).
        effect: What it does to the world, and what a call that may have
            happened gets after a crash (see `Effect`).
        run_policy: Whether its calls may run (see `RunPolicy`); a `Toolbox` may
            override it.
        retries: How many times a call that fails transiently is tried again
            in the call, when it is to be observed after them.
        on_exhausted: What such a call gets after its retries: ``"observe"``,
            ``"escalate"``, or ``None`` (its caller's default).
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        thread: bool = True,
        sandbox: Sandbox | None = None,
        effect: Effect | str = Effect.READ,
        run: RunPolicy | str = RunPolicy.ALLOW,
        retries: int = 2,
        on_exhausted: OnExhausted | None = None,
    ) -> None:
        self.fn = fn
        self.name = name if name is not None else fn.__name__
        self.target = f"{fn.__module__}:{fn.__qualname__}"
        if not _NAME.match(self.name):
            raise ConfigurationError(
                f"tool name {self.name!r} ({self.target}) is not accepted by model APIs; use "
                "1 to 64 letters, digits, '_' or '-', e.g. @tool(name='search_web')"
            )
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            raise ConfigurationError(
                f"tool {self.name!r}: timeout must be a positive number of seconds, got {timeout!r}"
            )
        if concurrency is not None and (isinstance(concurrency, bool) or concurrency < 1):
            raise ConfigurationError(
                f"tool {self.name!r}: concurrency must be an int >= 1 or None, got {concurrency!r}"
            )
        if sandbox is not None and ("<locals>" in fn.__qualname__ or fn.__module__ == "__main__"):
            raise ConfigurationError(
                f"sandboxed tool {self.name!r} is {self.target}, which a subprocess cannot "
                "import; define it at the top level of an importable module"
            )
        if sandbox is not None and timeout is None:
            timeout = SANDBOX_TIMEOUT
        self.timeout = timeout
        self.concurrency = concurrency
        self.thread = thread
        self.sandbox = sandbox
        self.effect = effect_of(effect, tool=self.name)
        self.run_policy = policy_of(run, tool=self.name)
        self.retries = retries_of(retries, tool=self.name)
        self.on_exhausted: OnExhausted | None = (
            None if on_exhausted is None else on_exhausted_of(on_exhausted, tool=self.name)
        )
        summary, described = _parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        self.arguments, self._parameters = _arguments_model(self.name, self.target, fn, described)
        self.takes_context = any(field is None for _, field, _ in self._parameters)
        self._coroutine = inspect.iscoroutinefunction(fn)
        if sandbox is not None and self.takes_context:
            raise ConfigurationError(
                f"sandboxed tool {self.name!r} ({self.target}) declares a ToolContext parameter; "
                "a sandboxed call runs in another process, which the session's resources cannot "
                "reach: drop the parameter, or the sandbox"
            )
        parameters = self.arguments.model_json_schema(schema_generator=_Schema)
        parameters.pop("title", None)
        self.spec = ToolSpec(name=self.name, description=self.description, parameters=parameters)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<Tool {self.name!r} ({self.target})>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself: no validation, timeout or sandbox."""
        return self.fn(*args, **kwargs)

    def validate(self, arguments: str | Mapping[str, Any]) -> BaseModel:
        """Validate arguments (JSON text, as the model writes them, or a mapping).

        Raises:
            pydantic.ValidationError: The arguments do not fit the parameters.
        """
        if isinstance(arguments, str):
            return self.arguments.model_validate_json(arguments.strip() or "{}")
        return self.arguments.model_validate(arguments)

    async def run(self, arguments: BaseModel, context: ToolContext | None = None) -> str:
        """Run the tool with validated arguments; return its result as text.

        A `str` result is returned as it is, anything else dumped as JSON.
        ``context`` goes to a `ToolContext` parameter (one is made for this
        task's session, with no call id, when none is given).

        Raises:
            ToolTimeout: The call ran past the tool's timeout.
            ToolError: A sandboxed call crashed, hit a limit or wrote too much.
            Exception: Whatever the tool itself raised.
        """
        if self.sandbox is not None:
            assert self.timeout is not None
            return await run_sandboxed(
                self.name, self.target, arguments, self.sandbox, self.timeout
            )
        timeout = self.timeout
        if timeout is None:  # no limit: no cancel scope to enter and leave
            return result_text(await self.call_with(arguments, context))
        with anyio.move_on_after(timeout) as scope:
            return result_text(await self.call_with(arguments, context))
        assert scope.cancelled_caught
        raise ToolTimeout(tool=self.name, timeout=timeout)

    async def call_with(self, arguments: BaseModel, context: ToolContext | None = None) -> Any:
        """Call the function with validated arguments, in this process; return what it returns.

        A `ToolContext` parameter gets ``context`` (this task's, with no call
        id, when none is given).
        """
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        if self.takes_context and context is None:
            context = tool_context(None)
        for parameter, field, positional in self._parameters:
            value = context if field is None else getattr(arguments, field)
            if positional:
                args.append(value)
            else:
                kwargs[parameter] = value
        fn: Callable[..., Any] = self.fn
        if self._coroutine:
            return await fn(*args, **kwargs)
        if self.thread:
            value = await anyio.to_thread.run_sync(
                functools.partial(fn, *args, **kwargs), abandon_on_cancel=True
            )
        else:
            value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value


def result_text(value: Any) -> str:
    """A tool's result as the text the model gets: a `str` as it is, else JSON.

    Raises:
        ToolError: The value cannot be dumped as JSON.
    """
    if isinstance(value, str):
        return value
    try:
        return to_json(value).decode()
    except PydanticSerializationError as exc:
        raise ToolError(
            f"the tool returned a {type(value).__name__}, which cannot be sent as JSON ({exc}); "
            "return a str, JSON data or a pydantic model"
        ) from exc


def _arguments_model(
    name: str, target: str, fn: Callable[..., Any], described: dict[str, str]
) -> tuple[type[BaseModel], list[tuple[str, str | None, bool]]]:
    """The pydantic model of ``fn``'s parameters, and (parameter, field, positional-only) rows.

    A `ToolContext` parameter has no field (``None``): it is not the model's to send.
    """
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ConfigurationError(
            f"tool {name!r} ({target}): cannot resolve its annotations ({exc!r}); import the "
            "types it names at module level"
        ) from exc
    fields: dict[str, Any] = {}
    rows: list[tuple[str, str | None, bool]] = []
    for parameter, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(
                f"tool {name!r} ({target}) takes *{parameter}; a tool's parameters must be named "
                "so the model can be told them: list them one by one"
            )
        if parameter not in hints:
            raise ConfigurationError(
                f"tool {name!r} ({target}): parameter {parameter!r} has no annotation; annotate "
                "it so its arguments can be validated and described to the model"
            )
        if is_context(hints[parameter]):
            rows.append((parameter, None, param.kind is param.POSITIONAL_ONLY))
            continue
        default = ... if param.default is param.empty else param.default
        extra: dict[str, Any] = {}
        if parameter in described:
            extra["description"] = described[parameter]
        field = _field_name(parameter)
        fields[field] = (hints[parameter], Field(default, alias=parameter, **extra))
        rows.append((parameter, field, param.kind is param.POSITIONAL_ONLY))
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return model, rows


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
    thread: bool = True,
    sandbox: Sandbox | None = None,
    effect: Effect | str = Effect.READ,
    run: RunPolicy | str = RunPolicy.ALLOW,
    retries: int = 2,
    on_exhausted: OnExhausted | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
    thread: bool = True,
    sandbox: Sandbox | None = None,
    effect: Effect | str = Effect.READ,
    run: RunPolicy | str = RunPolicy.ALLOW,
    retries: int = 2,
    on_exhausted: OnExhausted | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a typed function, async or sync, into a `Tool`; bare or with options.

    ::

        @tool(timeout=10, concurrency=4)
        async def weather(city: str, days: int = 1) -> Forecast:
            \"\"\"The forecast for a city, ``days`` ahead.\"\"\"

    Args:
        fn: The function (when used bare, ``@tool``).
        name: The name the model calls it by; the function's name by default.
        description: What it does; the docstring's first paragraph by default.
        timeout: Seconds a call may run; past it the call raises `ToolTimeout`
            (transient: retried, see ``on_exhausted``). A sandboxed tool has
            ``SANDBOX_TIMEOUT`` (30 s) unless it says otherwise.
        concurrency: How many calls may run at once in a `Toolbox` (shared by
            every session that uses the toolbox).
        thread: Run a synchronous function in a worker thread (the default) or
            in the event loop (for quick, non-blocking functions). A thread
            that overruns its timeout is abandoned, not stopped.
        sandbox: Run each call in a subprocess with these limits.
        effect: What it does to the world (`Effect`, or its value): ``"read"``
            (the default: nothing changes, nothing is kept), or side effects,
            with what a call that started and never finished gets (a crash, a
            timeout): ``"idempotent"`` (it runs again), ``"ask"`` (a human
            decides, at the agent's ``"tool call"`` gate) or ``"fail"`` (the
            session fails). A side-effecting call's intent and result are kept
            in the session's effect ledger (with a store): a call that returned
            is never run again, its stored result answers it.
        run: Whether its calls run (`RunPolicy`, or its value): ``"allow"``
            (the default), ``"approve"`` (each waits for a human's approval,
            its arguments shown and editable) or ``"block"``.
        retries: How many times a call that raises `Transient` (or runs past its
            timeout) is tried again within the call, after a backoff, when it is
            to be observed (below). Not used when it escalates.
        on_exhausted: What the call gets once its retries are used up:
            ``"observe"``: the model gets ``"Error after N attempts: <message>"``
            as its result (an error result) and decides; ``"escalate"``: the
            failure goes to the supervisor (its backoff retries the step, then
            restarts, then the session fails). ``None`` (the default): the
            caller's choice (the ReAct engine's ``tool_failures``, ``"observe"``
            by default; a direct `Toolbox.call`: ``"escalate"``). A timeout of a
            tool with side effects always escalates: its effect may have happened.

    A parameter annotated `ToolContext` gets the call's context (its session,
    step, call id and the machine's resources); it is not in the schema the
    model sees.

    Returns:
        The `Tool`, or a decorator that makes one.

    Raises:
        ConfigurationError: The name is not one model APIs accept, a parameter
            is unannotated or variadic, an option is out of range or unknown, or a
            sandboxed function cannot be imported by a subprocess or declares
            a `ToolContext` parameter.
    """
    options: dict[str, Any] = {key: value for key, value in locals().items() if key != "fn"}

    def decorate(fn: Callable[P, R]) -> Tool[P, R]:
        return Tool(fn, **options)

    return decorate if fn is None else decorate(fn)
