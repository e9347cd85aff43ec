"""`MCPToolbox`: the tools of an MCP server (over stdio or streamable HTTP), with Python tools.

It is a `Toolbox`: a call goes through `Toolbox.call` (recorded as
``"tool:<name>"``, answered from the record in a replay, counted, bounded by
the toolbox's ``concurrency``), and a call of one of its Python tools runs as
in any toolbox. A call of a server's tool is checked against the tool's
input schema, sent with the MCP SDK's `ClientSession`, and its result made
text (`._mcp_results`). The connection is kept by a task of the toolbox's
own (`._mcp_link`), opened by ``async with`` (or by the agent system, for a
`react_agent`'s toolbox) and made again on the next call after it broke.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, Fatal, ToolTimeout
from .._hooks import current_injector
from .._redact import scrub, scrub_secrets
from ..protocols import ToolMessage, ToolSpec
from ._effects import (
    Effect,
    Ledger,
    RunPolicy,
    effect_of,
    idempotency_key,
    policy_of,
    refused_by,
    run_once,
)
from ._mcp_link import Connection, Server, observation
from ._mcp_results import (
    model_name,
    register_credentials,
    result_text,
    shown_url,
    spec_of,
)
from ._mcp_schema import ArgumentCheck, unfollowable
from ._retry import observes
from ._toolbox import Toolbox, _inject

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from types import TracebackType
    from typing import Self

    from mcp.types import Tool as MCPTool

    from ..protocols import ToolCall
    from ._tool import Tool
    from ._toolbox import _Site

__all__ = ["MCPToolbox"]

_INSTALL = 'pip install "arkhon-rheo[mcp]"'
#: The most names an error suggests for ``include=`` (a server may list hundreds).
_MAX_NAMES_SHOWN = 12


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"MCPToolbox needs the MCP SDK, which is not installed: {_INSTALL}"
        ) from exc


def _seconds(name: str, value: float | None, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(
            f"MCPToolbox {name} must be a positive number of seconds"
            f"{' or None' if optional else ''}, got {value!r}"
        )
    return float(value) if math.isfinite(value) else None


class MCPToolbox(Toolbox):
    """The tools of an MCP server, and Python tools beside them; a `Toolbox` (a `ToolRunner`).

    Made with `stdio` (the server runs as a subprocess) or `http` (a streamable
    HTTP endpoint). Open it with ``async with`` to connect and list the
    server's tools; a `react_agent` needs no ``async with``: it declares its
    toolbox as a resource, which the `AgentSystem` opens in a task of its own
    (the SDK's connection must be left by the task that entered it) and closes
    when it stops. It may be opened again after it was closed.

    The model sees the Python tools first, then the server's, each under its
    name with ``prefix`` before it (characters model APIs refuse become
    ``_``), with the server's description and ``inputSchema``. A call is
    recorded and replayed like any tool call (a replay answers it from the
    record, without the server). Its result is the tool's structured content
    as JSON, else its text, with images, audio and resources described.

    What the model gets as an error message (``is_error=True``): arguments that
    are not JSON or do not fit the tool's schema (checked here, and by the
    server), a result the server marks ``isError``, and a call past
    ``timeout`` when the call's ``on_exhausted`` is ``"observe"`` (a
    `react_agent`'s default), as a Python tool's: ``"Error after 1 attempt:
    ..."``. What is raised: the server gone (exited, connection refused or
    dropped) as `Transient`, so the supervisor retries the stage, and the call
    after it connects again; a call past ``timeout`` as `ToolTimeout` when it
    escalates, and always for a tool with side effects (``effects``: it may
    have happened; the effect ledger decides on the next attempt); a server
    that cannot be started or does not speak the protocol as `Fatal`, saying
    what to fix.

    When it opens, every tool it offers is checked: a tool with an empty name,
    or whose ``inputSchema`` cannot be followed (a ``$ref`` to another document:
    remote references are never fetched; one that points nowhere; references
    that loop, ``{"$ref": "#"}``), is refused with a `ConfigurationError`
    naming the server and the tool (``include=`` leaves it out).

    Credentials are registered for scrubbing: the values of ``headers`` and
    ``env`` named like one (``Authorization``, ``X-API-Key``, ``GITHUB_TOKEN``...)
    and a password or token in the URL; a tool's result quoting one is
    recorded, stored and returned masked.

    Args:
        server: Where the server is (made by `stdio` or `http`).
        tools: Python tools offered beside the server's, made with `tool`.
        prefix: Put before each of the server's tool names (``"github_"``).
        include: The server's tools to offer, by their names on the server;
            all of them when ``None``.
        effects: The effects of the server's tools (`Effect`, or its value), by
            their names on the server; ``read`` for the others. A call of a tool
            with side effects runs through the session's effect ledger, as a
            Python tool's does: at most once, whatever retries and resumes.
        specs: The server's tools as the model saw them (`server_specs` of an
            earlier run), offered until the toolbox lists them: to replay a
            session in a process that cannot reach the server.
        timeout: Seconds a call may take (`ToolTimeout` past it), or ``None``.
        connect_timeout: Seconds the connection, handshake and listing may take.
        concurrency: How many calls may run at once in all, or ``None``.
        policies: Run policies (`RunPolicy`, or its value: ``"allow"``,
            ``"approve"``, ``"block"``), by tool name: a Python tool's name, or
            a server's tool's name on the server (as ``effects``). A server's
            tool to ``approve`` holds each call for a human (a `react_agent`
            pauses at its ``"tool call"`` gate); a blocked one is not offered,
            and a call of it is answered with an error.
        default_policy: The run policy of the server's tools that ``policies``
            does not name (``"allow"`` by default).

    Raises:
        ConfigurationError: The MCP SDK is not installed (``pip install
            "arkhon-rheo[mcp]"``), or an argument is invalid. A name in
            ``include``, ``effects`` or ``policies`` that the server does not
            list is refused when the toolbox opens, naming the server's tools.
    """

    def __init__(
        self,
        server: Server,
        *,
        tools: Sequence[Tool[..., Any]] = (),
        prefix: str = "",
        include: Collection[str] | None = None,
        effects: Mapping[str, Effect | str] | None = None,
        specs: Sequence[ToolSpec] | None = None,
        timeout: float | None = 60.0,
        connect_timeout: float = 30.0,
        concurrency: int | None = None,
        policies: Mapping[str, RunPolicy | str] | None = None,
        default_policy: RunPolicy | str = RunPolicy.ALLOW,
    ) -> None:
        _require_sdk()
        if not isinstance(server, Server):
            raise ConfigurationError(
                f"MCPToolbox takes a server made by MCPToolbox.stdio or MCPToolbox.http, "
                f"got {server!r}"
            )
        local = {getattr(one, "name", None) for one in tools}
        policies = dict(policies or {})
        super().__init__(
            *tools,
            concurrency=concurrency,
            policies={name: one for name, one in policies.items() if name in local},
        )
        if not isinstance(prefix, str):
            raise ConfigurationError(f"MCPToolbox prefix must be a str, got {prefix!r}")
        self.prefix = prefix
        if isinstance(include, str):
            raise ConfigurationError(
                f"MCPToolbox include must be a collection of tool names, not one string: "
                f"{include!r} (write include=[{include!r}])"
            )
        self.include = frozenset(include) if include is not None else None
        #: The effects of the server's tools, by their names on the server.
        self.effects = {name: effect_of(one, tool=name) for name, one in (effects or {}).items()}
        #: The run policies of the server's tools, by their names on the server.
        self.policies = {
            name: policy_of(one, tool=name) for name, one in policies.items() if name not in local
        }
        #: The run policy of the server's tools that ``policies`` does not name.
        self.default_policy = policy_of(default_policy, tool="default_policy")
        held = {*self.policies.values(), self.default_policy}
        self.may_hold = (
            self.may_hold or RunPolicy.APPROVE in held or Effect.ASK in self.effects.values()
        )
        self.timeout = _seconds("timeout", timeout, optional=True)
        connect = _seconds("connect_timeout", connect_timeout, optional=False)
        self.server = server
        self._connection = Connection(server, connect or math.inf, self._listed)
        self._remote: dict[str, str] = {}
        self._checks: dict[str, ArgumentCheck] = {}
        self._mcp_specs: tuple[ToolSpec, ...] = tuple(
            ToolSpec.model_validate(one) for one in (specs or ())
        )

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **options: Any,
    ) -> MCPToolbox:
        """An MCP server run as a subprocess, spoken to over its stdin and stdout.

        Args:
            command: The executable (``"npx"``, ``sys.executable``...).
            args: Its arguments.
            env: Environment variables for it, over the SDK's safe defaults
                (``PATH``, ``HOME``...: the rest of this process's is not passed).
            cwd: Its working directory.
            **options: `MCPToolbox`'s other arguments (``tools``, ``prefix``...).

        Raises:
            ConfigurationError: The SDK is not installed, or an argument is invalid.
        """
        _require_sdk()
        if not isinstance(command, str) or not command:
            raise ConfigurationError(f"MCPToolbox.stdio needs a command, got {command!r}")
        if isinstance(args, str):
            raise ConfigurationError(
                f"MCPToolbox.stdio args must be a sequence of strings, not one string: {args!r}"
            )
        env = dict(env) if env is not None else None
        register_credentials(env or {})
        shown = " ".join((command, *map(str, args)))
        server = Server(
            label=scrub(f"stdio:{shown if len(shown) <= 80 else shown[:77] + '...'}"),
            command=command,
            args=tuple(str(one) for one in args),
            env=env,
            cwd=None if cwd is None else str(cwd),
        )
        return cls(server, **options)

    @classmethod
    def http(
        cls, url: str, *, headers: Mapping[str, str] | None = None, **options: Any
    ) -> MCPToolbox:
        """An MCP server at a streamable HTTP endpoint (``http://host:port/mcp``).

        Args:
            url: The endpoint.
            headers: Headers sent with every request (``Authorization``...);
                the ones named like a credential are registered for scrubbing.
            **options: `MCPToolbox`'s other arguments (``tools``, ``prefix``...).

        Raises:
            ConfigurationError: The SDK is not installed, or the URL is not http(s).
        """
        _require_sdk()
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"MCPToolbox.http needs an http:// or https:// URL, got {shown_url(str(url))!r}"
            )
        headers = dict(headers or {})
        register_credentials(headers)
        server = Server(label=shown_url(url), url=url, headers=headers)
        return cls(server, **options)

    def __repr__(self) -> str:
        names = [spec.name for spec in self.specs]
        return f"<MCPToolbox {self.server.label}: {', '.join(names) or '(no tools listed)'}>"

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The Python tools (blocked ones left out), then the server's, as last listed."""
        return (*super().specs, *self._mcp_specs)

    @property
    def server_specs(self) -> Sequence[ToolSpec]:
        """The server's tools alone, as last listed (what ``specs=`` takes)."""
        return self._mcp_specs

    @property
    def is_open(self) -> bool:
        """Whether it is connected, or connects on the next call (inside its ``async with``)."""
        return self._connection.is_open

    async def __aenter__(self) -> Self:
        """Connect to the server and list its tools.

        Raises:
            ConfigurationError: It is open already, the server's tools clash
                with the Python tools' names, or a tool it offers has an empty
                name or an input schema that cannot be followed.
            Transient: The server could not be reached.
            Fatal: It could not be started, or does not speak MCP as expected.
        """
        if self._connection.is_open:
            raise ConfigurationError(f"{self!r} is open already; open it once")
        await self._connection.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the connection (a stdio server is stopped)."""
        await self._connection.close()

    def _listed(self, tools: list[MCPTool]) -> None:
        """Take the server's listing: the specs, the names, the argument checks."""
        offered = [one for one in tools if self.include is None or one.name in self.include]
        self._refuse_unlisted(tools)
        remote: dict[str, str] = {}
        for one in offered:
            self._refuse_unfit(one, offered)
            name = model_name(self.prefix, one.name)
            if name in remote or name in self:
                raise ConfigurationError(
                    f"the MCP server {self.server.label}'s tool {one.name!r} is offered as "
                    f"{name!r}, a name another tool has; give MCPToolbox a prefix= to tell them "
                    "apart"
                )
            remote[name] = one.name
        self._checks = {
            name: ArgumentCheck(one.input_schema or {})
            for name, one in zip(remote, offered, strict=True)
        }
        self._mcp_specs = tuple(
            spec_of(one, name)
            for name, one in zip(remote, offered, strict=True)
            if self.policies.get(one.name, self.default_policy) is not RunPolicy.BLOCK
        )
        self._remote = remote  # blocked tools too: a call of one is answered "blocked"

    def _refuse_unlisted(self, tools: list[MCPTool]) -> None:
        """Refuse a name in ``include``, ``effects`` or ``policies`` the server does not list.

        Raises:
            ConfigurationError: Naming the argument, the names, and the server's tools.
        """
        listed = {one.name for one in tools}
        named = {"include": self.include or (), "effects": self.effects, "policies": self.policies}
        for argument, names in named.items():
            missing = sorted(set(names) - listed)
            if missing:
                python = " (nor is it one of its Python tools)" if argument == "policies" else ""
                raise ConfigurationError(
                    f"MCPToolbox {argument} names {missing}, which the MCP server "
                    f"{self.server.label} does not list{python} (it lists: "
                    f"{', '.join(one.name for one in tools) or 'none'})"
                )

    def policy(self, name: str) -> RunPolicy:
        """The run policy of tool ``name``, a Python tool or a server's (by its name for the model).

        ``ALLOW`` for a tool it lacks.
        """
        if name in self:
            return super().policy(name)
        remote = self._remote.get(name)
        if remote is not None:
            return self.policies.get(remote, self.default_policy)
        if any(spec.name == name for spec in self._mcp_specs):  # given by specs=, not listed yet
            named = {model_name(self.prefix, one): p for one, p in self.policies.items()}
            return named.get(name, self.default_policy)
        return RunPolicy.ALLOW

    def argument_problems(self, name: str, arguments: Mapping[str, Any]) -> str:
        """As `Toolbox`'s; a server's tool's by its input schema, as listed (or as ``specs=``)."""
        if name in self:
            return super().argument_problems(name, arguments)
        check = self._checks.get(name)
        if check is None and (spec := next((s for s in self._mcp_specs if s.name == name), None)):
            check = ArgumentCheck(spec.parameters)
        return "" if check is None else check.problems(arguments)

    def _refuse_unfit(self, one: MCPTool, offered: list[MCPTool]) -> None:
        """Refuse a tool the model cannot be offered: no name, or a schema that cannot be followed.

        Raises:
            ConfigurationError: Naming the server, the tool, and how to leave it out.
        """
        others = [other.name for other in offered if other is not one and other.name]
        shown = repr(others) if len(others) <= _MAX_NAMES_SHOWN else "[the others' names]"
        leave_out = f"or leave it out with include={shown}"
        if not one.name:
            raise ConfigurationError(
                f"the MCP server {self.server.label} lists a tool with an empty name, which a "
                f"model cannot call; fix the server, {leave_out}"
            )
        problem = unfollowable(one.input_schema or {})
        if problem is not None:
            raise ConfigurationError(
                f"the MCP server {self.server.label}'s tool {one.name!r} has an input schema "
                f"that cannot be followed: {problem}; a schema may reference only itself "
                f"('#/$defs/...'); fix the tool's schema on the server, {leave_out}"
            )

    async def _answer(self, site: _Site, text: str, arguments: Any) -> ToolMessage:
        """A Python tool's call as `Toolbox` answers it; a server's tool's, by the server."""
        call = site.call
        if call.name in self:
            return await super()._answer(site, text, arguments)
        if call.name not in self._remote:
            if not self.is_open:
                await self._connection.acquire()  # raises: not open
            known = ", ".join(spec.name for spec in self.specs) or "none"
            return self._error(call, f"unknown tool {call.name!r}; the tools are: {known}")
        if isinstance(arguments, str):
            return self._error(
                call,
                f"the arguments of {call.name!r} are not JSON ({arguments[:80]!r}); "
                "send a JSON object with the tool's parameters",
            )
        if not isinstance(arguments, dict):
            return self._error(
                call, f"the arguments of {call.name!r} must be a JSON object, got {text[:80]!r}"
            )
        problems = self._checks[call.name].problems(arguments)
        if problems:
            return self._error(
                call,
                f"invalid arguments for {call.name!r}: {problems}; call it again with "
                "arguments that match its parameters",
            )
        refused = refused_by(self.policy(call.name), call, approved=site.approved)
        if refused is not None:
            return self._error(call, refused)
        effect = self.effects.get(self._remote[call.name], Effect.READ)
        try:
            return await self._run_effect(site, effect, arguments)
        except ToolTimeout as exc:
            # As a Python tool's: observed (by the call's on_exhausted), unless the
            # tool has side effects: then it escalates, and the effect ledger decides.
            if not observes(site.on_exhausted, effect, exc):
                raise
            return self._exhausted_answer(call, 1, exc)

    async def _run_effect(
        self, site: _Site, effect: Effect, arguments: dict[str, Any]
    ) -> ToolMessage:
        """Call the server, through the session's effect ledger for a tool with side effects."""
        call = site.call
        sid, step, store = site.session_id, site.step, site.store
        key = idempotency_key(sid, step, call.id) if sid and step is not None and call.id else None
        if effect is Effect.READ or store is None or key is None:
            return await self._run_server(call, arguments)
        return await run_once(
            Ledger(store, sid, key),
            call,
            effect,
            arguments,
            lambda: self._run_server(call, arguments),
            rerun=site.rerun,
        )

    async def _run_server(self, call: ToolCall, arguments: dict[str, Any]) -> ToolMessage:
        async with self._capacity(call.name):
            if current_injector() is not None:
                await _inject(call.name, arguments)
            return await self._call_server(call, arguments)

    async def _call_server(self, call: ToolCall, arguments: dict[str, Any]) -> ToolMessage:
        connection = self._connection
        link = await connection.acquire()
        session = link.session
        if session is None:  # closed between the two
            raise Fatal(f"the MCP toolbox of {self.server.label} was closed")
        try:
            result = await session.call_tool(
                self._remote[call.name], arguments, read_timeout_seconds=self.timeout
            )
        except Exception as exc:
            refused = observation(exc)
            if refused is not None:
                return self._error(
                    call, f"{refused}; call {call.name!r} again with arguments that fit its schema"
                )
            raise await connection.failed(link, exc, call.name, self.timeout) from exc
        return ToolMessage(
            tool_call_id=call.id,
            name=call.name,
            content=scrub_secrets(result_text(result)),  # a credential it echoes
            is_error=bool(result.is_error),
        )
