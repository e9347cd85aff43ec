"""`MCPToolbox` against a real MCP server (`tests/support/mcp_server.py`), over stdio and HTTP.

The server runs in a subprocess, as the SDK's own server framework serves
it: over stdio (the toolbox starts it) or streamable HTTP on 127.0.0.1 (the
test starts it, on a free port). Every test runs on asyncio and trio.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from structlog.testing import capture_logs

from arkhon_rheo import AgentSystem, ConfigurationError, Fatal, Transient
from arkhon_rheo.errors import ResourceUnavailable, ToolTimeout
from arkhon_rheo.protocols import ToolCall, ToolMessage
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import MCPToolbox, tool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from anyio.abc import Process

pytestmark = [
    pytest.mark.anyio,
    # On trio, the SDK's HTTP transport leaves httpx2's SSE generators to the garbage
    # collector when it closes (its stream tasks are cancelled mid-iteration): trio warns.
    pytest.mark.filterwarnings("ignore:Async generator 'http(x|core)2[.]:ResourceWarning"),
]

#: The repository's root: the server is ``python -m tests.support.mcp_server``.
ROOT = str(Path(__file__).resolve().parents[2])
SERVER = [sys.executable, "-m", "tests.support.mcp_server"]
SECRET = "s3cr3t-header-token-4242"

#: Run a test over both transports.
transports = pytest.mark.parametrize("transport", ["stdio", "http"])


def _env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}


async def start_http(port: int = 0) -> tuple[Process, int]:
    """Start the HTTP server (on a free port by default); return it and its port once it listens."""
    process = await anyio.open_process(
        [*SERVER, "http", str(port)], env={**os.environ, **_env()}, stderr=None
    )
    assert process.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        line += await process.stdout.receive()
    return process, int(line)


class HttpServer:
    """The test's HTTP server: its URL, and a way to kill it and start it again on its port."""

    def __init__(self, process: Process, port: int) -> None:
        self.process, self.port = process, port
        self.url = f"http://127.0.0.1:{port}/mcp"

    async def restart(self) -> None:
        await self.stop()
        self.process, _ = await start_http(self.port)

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


@pytest.fixture(scope="module")
def shared_url() -> Iterator[str]:
    """The URL of an HTTP server the tests that leave it running share (started once)."""
    process = subprocess.Popen(
        [*SERVER, "http"], env={**os.environ, **_env()}, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait()
    process.stdout.close()


@asynccontextmanager
async def server_for(transport: str) -> AsyncIterator[HttpServer | None]:
    """A server of the test's own for ``"http"`` (stopped after the block), nothing for stdio."""
    if transport == "stdio":
        yield None
        return
    server = HttpServer(*await start_http())
    try:
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop()


def free_url(password: str = "") -> str:
    """The URL of an HTTP server that is not there: a port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://{'user:' + password + '@' if password else ''}127.0.0.1:{port}/mcp"


def toolbox(transport: str, server: HttpServer | str | None, **options: Any) -> MCPToolbox:
    """A toolbox of the stdio server (it starts its own), or of the HTTP server given."""
    if transport == "stdio":
        return MCPToolbox.stdio(SERVER[0], [*SERVER[1:], "stdio"], env=_env(), **options)
    assert server is not None
    headers = {"Authorization": f"Bearer {SECRET}", "X-Tenant": "acme"}
    url = server if isinstance(server, str) else server.url
    return MCPToolbox.http(url, headers=headers, **options)


def call(name: str, arguments: dict[str, Any] | str = "{}", id: str = "c1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=id, name=name, arguments=text)


def server_of(transport: str, shared_url: str) -> str | None:
    return shared_url if transport == "http" else None


@transports
async def test_it_lists_the_tools_and_answers_calls_bad_arguments_as_observations(
    transport: str, shared_url: str
) -> None:
    async with toolbox(transport, server_of(transport, shared_url)) as tools:
        assert tools.is_open
        specs = {spec.name: spec for spec in tools.specs}
        added = await tools.call(call("add", {"a": 2, "b": 3}, id="x1"))
        stats = await tools.call(call("stats", {"numbers": [1, 2, 3]}))
        pixel = await tools.call(call("pixel"))
        failed = await tools.call(call("fail", {"message": "the disk is full"}))
        wrong = await tools.call(call("add", {"a": "two"}))
        not_json = await tools.call(call("add", "{a: 1"))
        not_object = await tools.call(call("add", "[1, 2]"))
        unknown = await tools.call(call("subtract", {"a": 1}))
    assert list(specs) == [
        *("add", "fail", "stats", "pixel", "whoami", "header", "hang", "send_email", "sent")
    ]
    add = specs["add"]
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert "title" not in add.parameters  # the schema's own title is of no use to the model
    assert specs["stats"].parameters["properties"]["numbers"]["type"] == "array"
    assert not tools.is_open
    assert list(specs.values()) == list(tools.specs)  # kept after closing

    assert added == ToolMessage(tool_call_id="x1", name="add", content='{"result":5}')
    assert json.loads(stats.content) == {"count": 3, "total": 6.0, "mean": 2.0}
    assert pixel.content.startswith("[image: image/png, about ")
    assert failed.is_error  # the server's isError: an observation for the model
    assert "the disk is full" in failed.content
    assert tools.statistics().calls == 8
    assert tools.statistics().errors == 5

    # Arguments that do not fit the tool's schema are checked here, before the call.
    assert wrong.is_error
    assert "invalid arguments for 'add'" in wrong.content
    assert "'b' is a required property" in wrong.content
    assert "a: 'two' is not of type 'integer'" in wrong.content
    assert not_json.is_error
    assert "not JSON" in not_json.content
    assert not_object.is_error
    assert "must be a JSON object" in not_object.content
    assert unknown.is_error
    assert "unknown tool 'subtract'; the tools are: add, fail" in unknown.content


@transports
async def test_a_react_agent_calls_the_servers_tools_and_replays_without_it(
    transport: str, shared_url: str, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            [call("add", {"a": 17, "b": 25}, id="1"), call("stats", {"numbers": [4, 8]}, id="2")],
            call("fail", {"message": "no such city"}, id="3"),
            "42, and the mean is 6",
        ]
    )
    tools = toolbox(transport, server_of(transport, shared_url))
    agent = react_agent(model, tools)
    async with AgentSystem(path=tmp_path / "a.db") as system:  # it opens the toolbox
        result = await system.run(agent, ReactState(task="sums"), session_id="s")
        assert tools.is_open
        replayed = await system.stored(agent, "s").replay(reexecute=True)
    assert not tools.is_open  # closed by the system: a stdio server is stopped
    assert result.ok
    assert result.state.answer == "42, and the mean is 6"
    results = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert [(m.name, m.is_error) for m in results] == [
        ("add", False),
        ("stats", False),
        ("fail", True),
    ]
    assert results[0].content == '{"result":42}'
    assert [spec.name for spec in model.requests[0].tools][:3] == ["add", "fail", "stats"]
    assert replayed.ok, replayed.divergence

    # A toolbox that cannot reach any server replays the session from its record.
    offline = MCPToolbox.stdio("/nonexistent/mcp-server", specs=tools.specs)
    again = react_agent(ScriptedModel(), offline)
    async with AgentSystem(path=tmp_path / "a.db") as system:
        report = await system.stored(again, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert report.reexecuted > 0
    assert report.state == result.state
    assert not offline.is_open


@transports
async def test_a_server_killed_mid_session_is_transient_and_the_retry_reconnects(
    transport: str,
) -> None:
    async with server_for(transport) as server:

        @tool
        async def crash_server() -> str:
            """Kill the MCP server (over HTTP, start it again on its port)."""
            if server is not None:
                await server.restart()
            else:
                os.kill(pids[0], signal.SIGKILL)
            return "crashed"

        model = ScriptedModel([call("crash_server"), call("add", {"a": 1, "b": 2}), "3"])
        tools = toolbox(transport, server, tools=[crash_server])
        agent = react_agent(model, tools)
        async with tools, AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
            pids = [int(json.loads((await tools.call(call("whoami"))).content)["result"])]
            with capture_logs() as logs:
                result = await system.run(agent, ReactState(task="add"))
            after = int(json.loads((await tools.call(call("whoami"))).content)["result"])
    assert result.ok, result.failure
    assert result.state.answer == "3"
    added = [m for m in result.state.messages if isinstance(m, ToolMessage) and m.name == "add"]
    assert [m.content for m in added] == ['{"result":3}']
    assert after != pids[0]  # a new server process answered
    assert tools.statistics().raised == 1  # the call on the dead server, then its retry
    retries = [log for log in logs if log["event"] == "stage_retrying"]
    assert [log["stage"] for log in retries] == ["act"]
    assert "Transient" in retries[0]["error"]
    assert "MCP server" in retries[0]["error"]


@transports
async def test_a_server_gone_is_transient_until_it_is_back(transport: str) -> None:
    async with server_for(transport) as server, toolbox(transport, server) as tools:
        first = int(json.loads((await tools.call(call("whoami"))).content)["result"])
        if server is not None:
            await server.stop()  # and nothing listens on its port
            with pytest.raises(Transient, match=r"is unreachable \(ConnectError"):
                await tools.call(call("add", {"a": 1, "b": 1}))
            with pytest.raises(Transient, match="is unreachable"):  # it tries again
                await tools.call(call("add", {"a": 1, "b": 1}))
            await server.restart()
        else:
            os.kill(first, signal.SIGKILL)
            with pytest.raises(Transient, match="closed the connection"):
                await tools.call(call("add", {"a": 1, "b": 1}))
        assert (await tools.call(call("add", {"a": 1, "b": 1}))).content == '{"result":2}'
        second = int(json.loads((await tools.call(call("whoami"))).content)["result"])
    assert second != first


async def test_a_header_secret_the_server_echoes_is_scrubbed(
    shared_url: str, tmp_path: Path
) -> None:
    model = ScriptedModel([call("header", {"name": "Authorization"}), "done"])
    tools = toolbox("http", shared_url)
    agent = react_agent(model, tools)
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="who am I"), session_id="s")
        history = await system.stored(agent, "s").history()
    async with tools:
        direct = await tools.call(call("header", {"name": "Authorization"}))
        tenant = await tools.call(call("header", {"name": "X-Tenant"}))
    echoed = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert echoed[0].content == '{"result":"[REDACTED]"}'
    assert direct.content == '{"result":"[REDACTED]"}'
    assert tenant.content == '{"result":"acme"}'  # not named like a credential: not masked
    stored = repr(history)
    assert "[REDACTED]" in stored
    assert SECRET not in stored
    assert SECRET not in repr(tools)


async def test_a_tool_with_side_effects_runs_through_the_effect_ledger(
    shared_url: str, tmp_path: Path
) -> None:
    model = ScriptedModel([call("add", {"a": 1, "b": 2}, id="e1"), "3"])
    tools = toolbox("http", shared_url, effects={"add": "idempotent"})
    agent = react_agent(model, tools)
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="1 + 2"), session_id="s")
        assert system.store is not None
        effects = await system.store.effects("s")
    assert result.ok
    assert [(one.tool, one.status.value, one.arguments) for one in effects] == [
        ("add", "done", {"a": 1, "b": 2})
    ]
    unknown = toolbox("http", shared_url, effects={"delete_everything": "fail"})
    with pytest.raises(ConfigurationError, match="effects names \\['delete_everything'\\]"):
        async with unknown:
            pass


async def test_a_password_in_the_url_is_masked_and_scrubbed() -> None:
    tools = MCPToolbox.http(free_url(password="pa55-w0rd-zz"), connect_timeout=10)
    assert "pa55-w0rd-zz" not in repr(tools)
    with pytest.raises(Transient, match="is unreachable") as caught:
        async with tools:
            pass
    assert "pa55-w0rd-zz" not in str(caught.value)
    assert "user:[REDACTED]@127.0.0.1" in str(caught.value)


@transports
async def test_a_call_past_its_timeout_and_calls_from_many_tasks(
    transport: str, shared_url: str
) -> None:
    results: dict[int, str] = {}
    server = server_of(transport, shared_url)
    async with toolbox(transport, server, timeout=0.2, concurrency=4) as tools:
        with pytest.raises(ToolTimeout, match=r"MCPToolbox\(timeout=\.\.\.\)"):
            await tools.call(call("hang"))

        async def one(n: int) -> None:
            results[n] = (await tools.call(call("add", {"a": n, "b": n}))).content

        async with anyio.create_task_group() as group:  # one connection, shared
            for n in range(20):
                group.start_soon(one, n)
    assert results == {n: json.dumps({"result": 2 * n}, separators=(",", ":")) for n in range(20)}


async def test_python_tools_sit_beside_the_servers(shared_url: str) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers, in Python."""
        return a + b + 1000

    transport, server = "http", shared_url  # as over stdio: the toolbox's own logic
    clash = toolbox(transport, server, tools=[add])
    with pytest.raises(ConfigurationError, match="give MCPToolbox a prefix="):
        async with clash:
            pass
    mixed = toolbox(transport, server, tools=[add], prefix="srv.", include=["add", "stats"])
    async with mixed:
        names = [spec.name for spec in mixed.specs]
        local = await mixed.call(call("add", {"a": 1, "b": 1}))
        remote = await mixed.call(call("srv_add", {"a": 1, "b": 1}))
        with pytest.raises(ConfigurationError, match="is open already"):
            await mixed.__aenter__()
    assert names == ["add", "srv_add", "srv_stats"]
    assert local.content == "1002"
    assert remote.content == '{"result":2}'
    async with mixed:  # it opens again after it was closed
        assert (await mixed.call(call("srv_add", {"a": 2, "b": 2}))).content == '{"result":4}'
    missing = toolbox(transport, server, include=["add", "multiply"])
    with pytest.raises(ConfigurationError, match="include names \\['multiply'\\]"):
        async with missing:
            pass


async def test_opening_failures_are_classified() -> None:
    with pytest.raises(Fatal, match="cannot start the MCP server stdio:/nonexistent/mcp-server"):
        async with MCPToolbox.stdio("/nonexistent/mcp-server"):
            pass
    with pytest.raises(Transient, match="is unreachable"):
        async with MCPToolbox.http(free_url()):
            pass
    refused = MCPToolbox.http(free_url())
    agent = react_agent(ScriptedModel(["hi"]), refused)
    async with AgentSystem(path=None) as system:
        with pytest.raises(ResourceUnavailable, match="resource 'tools'"):
            await system.run(agent, ReactState(task="hi"))


async def test_a_call_on_a_toolbox_not_open_says_how_to_open_it() -> None:
    tools = MCPToolbox.stdio("/nonexistent/mcp-server")
    with pytest.raises(Fatal, match="is not open: use it inside `async with`"):
        await tools.call(call("add", {"a": 1, "b": 1}))
