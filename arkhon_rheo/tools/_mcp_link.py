"""One connection to an MCP server, kept by a task of its own and made again when it breaks.

The MCP SDK's transports and `ClientSession` open cancel scopes and task
groups that must be left by the task that entered them. A `Connection`
therefore enters them in a keeper task of its own task group (entered by
whoever opens the toolbox: the agent system's resource keeper, or a user's
``async with``), and the sessions' tasks only send requests through the
`ClientSession` it holds. When a call finds the connection gone (the server
exited, the connection was refused or dropped), the caller marks the link
broken, the keeper leaves it, and the next call asks the keeper to connect
again: a `Transient` failure in between, which the supervisor retries.

Failures are classified here (`classify`): the server gone, a refused or
dropped connection and timeouts are `Transient`; a server that does not
speak the protocol, refuses the handshake or cannot be started is `Fatal`,
with what to fix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from .._errors import ArkhonError, Fatal, StageFailure, ToolTimeout, Transient
from .._log import get_logger
from .._redact import scrub

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    from anyio.abc import TaskGroup, TaskStatus
    from mcp import ClientSession
    from mcp.types import Tool as MCPTool

__all__ = ["Connection", "Server", "classify", "observation"]

_logger = get_logger("arkhon_rheo.tools")
#: The script a stdio server runs under (see `_reaped`).
_REAPER = str(Path(__file__).with_name("_mcp_reaper.py"))


@dataclass(frozen=True, slots=True)
class Server:
    """Where an MCP server is: a command run over stdio, or a streamable HTTP endpoint.

    Attributes:
        label: How it is shown in errors and logs (credentials masked).
        command: The command of a stdio server (``""`` for HTTP).
        args: Its arguments.
        env: Environment variables set for it, over the SDK's safe defaults.
        cwd: Its working directory.
        url: The endpoint of an HTTP server (``""`` for stdio).
        headers: Headers sent with every HTTP request.
    """

    label: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def streams(self, connect_timeout: float) -> AsyncIterator[Any]:
        """The transport's (read, write) streams, open for the block."""
        if self.command:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            command, args = _reaped(self.command, list(self.args), self.env)
            parameters = StdioServerParameters(
                command=command,
                args=args,
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
            )
            async with stdio_client(parameters, errlog=sys.stderr) as streams:
                yield streams
            return
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        timeout = httpx2.Timeout(connect_timeout, read=300.0)
        client = create_mcp_http_client(headers=dict(self.headers), timeout=timeout)
        async with client, streamable_http_client(self.url, http_client=client) as streams:
            yield streams


def _reaped(command: str, args: list[str], env: Mapping[str, str] | None) -> tuple[str, list[str]]:
    """The command that runs a stdio server under ``_mcp_reaper`` (Linux), else the server's.

    The SDK stops the server's process group, and only when it does not exit
    once its stdin is closed; the reaper stops every process the server
    started, a ``setsid`` one too, whenever the server stops. A command that
    cannot be found is left to the SDK, which says so.
    """
    path = (env or {}).get("PATH", os.environ.get("PATH", os.defpath))
    if sys.platform != "linux" or not sys.executable or shutil.which(command, path=path) is None:
        return command, args
    return sys.executable, ["-I", "-S", _REAPER, command, *args]


class Link:
    """One attempt at a connection: made when the keeper is asked, left when it breaks."""

    __slots__ = ("broken", "done", "error", "ready", "session", "wanted")

    def __init__(self) -> None:
        self.wanted = anyio.Event()  # a call asks for the connection
        self.ready = anyio.Event()  # connected, or failed to
        self.broken = anyio.Event()  # a call saw it gone, or the toolbox closes
        self.done = anyio.Event()  # left: the transport is closed
        self.session: ClientSession | None = None
        self.error: BaseException | None = None


class Connection:
    """The keeper of one MCP server's connection (see the module's docstring).

    Args:
        server: Where the server is.
        connect_timeout: Seconds the handshake and the tool listing may take.
        listed: Called with the server's tools after each (re)connection;
            what it raises fails the connection.
    """

    def __init__(
        self, server: Server, connect_timeout: float, listed: Callable[[list[MCPTool]], None]
    ) -> None:
        self.server = server
        self._connect_timeout = connect_timeout
        self._listed = listed
        self._link = Link()
        self._group: TaskGroup | None = None
        self._closing = False

    @property
    def is_open(self) -> bool:
        """Whether the connection is kept (between `open` and `close`)."""
        return self._group is not None

    async def open(self) -> None:
        """Start the keeper and connect; leave nothing running if the first connection fails.

        Raises:
            Transient: The server could not be reached, or went away during the handshake.
            Fatal: It could not be started, or does not speak MCP as expected.
        """
        group = anyio.create_task_group()
        await group.__aenter__()
        self._closing = False
        try:
            await group.start(self._keep)
        except BaseException as exc:
            group.cancel_scope.cancel()
            with contextlib.suppress(BaseException):
                await group.__aexit__(None, None, None)
            if isinstance(exc, Exception):
                raise classify(exc, self.server.label, opening=True) from exc
            raise
        self._group = group

    async def close(self) -> None:
        """Leave the connection (the keeper closes the transport: a stdio server is stopped)."""
        group, self._group = self._group, None
        if group is None:
            return
        self._closing = True
        link = self._link
        link.wanted.set()
        link.broken.set()
        await group.__aexit__(None, None, None)

    async def acquire(self) -> Link:
        """The connected link, connecting first if the last one broke.

        Raises:
            Fatal: The toolbox is not open.
            Transient: Connecting failed (see `classify`).
        """
        if self._group is None or self._closing:
            raise Fatal(
                f"the MCP toolbox of {self.server.label} is not open: use it inside "
                "`async with` (an agent system opens a react_agent's toolbox itself)"
            )
        link = self._link
        if not link.ready.is_set():
            link.wanted.set()
            await link.ready.wait()
        if link.session is None or link.broken.is_set():
            error = link.error
            if error is None:
                raise Transient(f"the connection to the MCP server {self.server.label} was closed")
            raise classify(error, self.server.label) from error
        return link

    async def failed(self, link: Link, exc: Exception, tool: str, limit: float | None) -> Exception:
        """The classified failure of a call on ``link``; the link is dropped if it is gone."""
        failure = classify(exc, self.server.label, tool=tool, timeout=limit)
        if isinstance(failure, Transient) and not isinstance(failure, ToolTimeout):
            link.broken.set()
            # The keeper's own error (a refused connection) says more: wait for it, a while.
            with anyio.CancelScope(shield=True) as scope:
                scope.deadline = anyio.current_time() + min(self._connect_timeout, 10.0)
                await link.done.wait()
            if link.error is not None and _code(exc) is not None:  # say why it closed
                why = classify(link.error, self.server.label, tool=tool)
                failure = why if isinstance(why, Transient) else failure
        return failure

    async def _keep(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect when asked, hold the connection until it breaks, and again, until closed."""
        first = True
        while not self._closing:
            link = self._link
            if not first:
                await link.wanted.wait()
                if self._closing:
                    link.ready.set()
                    link.done.set()
                    return
            try:
                await self._hold(link, task_status if first else None)
            except Exception as exc:
                link.error = exc
                if first and not link.ready.is_set():  # the toolbox's opening fails
                    raise
                _logger.warning(
                    "mcp_connection_failed",
                    server=self.server.label,
                    error=scrub(f"{type(exc).__name__}: {exc}"),
                )
            finally:
                link.session = None
                link.ready.set()
                link.done.set()
                self._link = (
                    Link()
                )  # no await since done: a caller never sees a done link as current
            first = False

    async def _hold(self, link: Link, task_status: TaskStatus[None] | None) -> None:
        from mcp import ClientSession

        async with (
            self.server.streams(self._connect_timeout) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(self._connect_timeout):
                await session.initialize()
                self._listed(await list_tools(session))
            link.session = session
            link.ready.set()
            if task_status is not None:
                task_status.started()
            _logger.debug("mcp_connected", server=self.server.label)
            await link.broken.wait()


async def list_tools(session: ClientSession) -> list[MCPTool]:
    """Every tool the server lists, page after page."""
    from mcp.types import PaginatedRequestParams

    tools: list[MCPTool] = []
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor:
            return tools


def _code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of an `MCPError`, else ``None``."""
    from mcp.shared.exceptions import MCPError

    return exc.code if isinstance(exc, MCPError) else None


def observation(exc: BaseException) -> str | None:
    """What the model is told of a call refused for what it sent (invalid params), or ``None``."""
    from mcp.types import INVALID_PARAMS

    if _code(exc) != INVALID_PARAMS:
        return None
    return f"the server refused the call ({scrub(str(exc))})"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for member in exc.exceptions for leaf in _leaves(member)]
    return [exc]


def _shown(exc: BaseException) -> str:
    text = str(exc)
    return scrub(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def classify(
    exc: BaseException,
    label: str,
    *,
    tool: str = "",
    timeout: float | None = None,
    opening: bool = False,
) -> Exception:
    """The library's classified failure for what an MCP connection or call raised.

    Args:
        exc: What the SDK (or its transport) raised.
        label: The server, as it may be shown.
        tool: The tool called, if a call failed.
        timeout: The call's timeout, for `ToolTimeout`.
        opening: The first connection failed (the toolbox is being opened).
    """
    leaves = [leaf for leaf in _leaves(exc) if isinstance(leaf, Exception)]
    if leaves:  # a transport's task group: the error that broke it, not a timeout it caused
        exc = next((leaf for leaf in leaves if not isinstance(leaf, TimeoutError)), leaves[0])
    if isinstance(exc, StageFailure):
        return exc
    if isinstance(exc, ArkhonError):  # the toolbox's own check of the listing
        return exc if opening else Fatal(str(exc))
    what = f"tool {tool!r} of the MCP server {label}" if tool else f"the MCP server {label}"
    code = _code(exc)
    if code is not None:
        return _classify_code(exc, code, what, tool, timeout)
    if isinstance(exc, TimeoutError):
        return Transient(f"{what} did not answer the handshake in time; is it running?")
    if isinstance(exc, FileNotFoundError | PermissionError):
        return Fatal(
            f"cannot start {what} ({_shown(exc)}); check the command, its arguments and PATH"
        )
    transport = _transport_failure(exc)
    if transport is not None:
        return Transient(f"{what} is unreachable ({transport}); retrying reconnects")
    if isinstance(exc, ValidationError):
        return Fatal(f"{what} sent a message that is not valid MCP ({_shown(exc)}); fix the server")
    fix = "check the server and the toolbox's settings" if opening else "fix the server"
    return Fatal(f"{what} failed: {_shown(exc)}; {fix}")


def _transport_failure(exc: BaseException) -> str | None:
    """How the connection failed, if ``exc`` is a broken or refused connection."""
    import httpx2

    broken = (
        OSError,
        EOFError,
        anyio.BrokenResourceError,
        anyio.ClosedResourceError,
        anyio.EndOfStream,
        httpx2.TransportError,
    )
    return _shown(exc) if isinstance(exc, broken) else None


def _classify_code(
    exc: BaseException, code: int, what: str, tool: str, timeout: float | None
) -> Exception:
    from mcp.types import (
        CONNECTION_CLOSED,
        INTERNAL_ERROR,
        INVALID_REQUEST,
        METHOD_NOT_FOUND,
        REQUEST_TIMEOUT,
        UNSUPPORTED_PROTOCOL_VERSION,
    )

    message = scrub(str(exc))
    if code == CONNECTION_CLOSED:
        return Transient(f"{what}: the server closed the connection (it exited or was stopped)")
    if code == REQUEST_TIMEOUT:
        if tool:
            return ToolTimeout(
                tool=tool,
                timeout=timeout if timeout is not None else 0.0,
                detail="for a tool of an MCP server, raise MCPToolbox(timeout=...)",
            )
        return Transient(f"{what} did not answer in time ({message})")
    if code == INVALID_REQUEST and "session" in message.lower():  # an HTTP server restarted
        return Transient(
            f"{what} no longer knows this connection's session ({message}); retrying connects again"
        )
    if code == INTERNAL_ERROR:
        return Transient(f"{what} answered with an error ({message}); retrying may help")
    if code == METHOD_NOT_FOUND:
        return Fatal(
            f"{what} does not support the request ({message}); check the URL (the endpoint "
            "is usually /mcp) and that the server offers tools"
        )
    if code == UNSUPPORTED_PROTOCOL_VERSION:
        return Fatal(f"{what} speaks another MCP version ({message}); upgrade it or the SDK")
    return Fatal(f"{what} refused the request (error {code}: {message}); fix the server")
