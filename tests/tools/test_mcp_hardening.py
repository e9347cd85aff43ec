"""`MCPToolbox` against misbehaving MCP servers: what it refuses when it opens, and hung calls.

The odd server (`tests/support/mcp_odd_server.py`) lists the tools a test
gives it, as given (empty names, schemas with any ``$ref``), over stdio; the
hung calls are the test server's ``hang`` (`tests/support/mcp_server.py`).
Every test runs on asyncio and trio.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError
from arkhon_rheo.errors import ToolTimeout
from arkhon_rheo.protocols import ToolMessage
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import MCPToolbox

from .test_mcp import _env, call, shared_url, toolbox

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["shared_url"]  # the fixture, shared with test_mcp

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator 'http(x|core)2[.]:ResourceWarning"),
]

ODD_SERVER = [sys.executable, "-m", "tests.support.mcp_odd_server"]
NUMBER = {"type": "object", "properties": {"n": {"type": "integer"}}}


def odd_toolbox(tools: list[dict[str, Any]], spawn: str = "", **options: Any) -> MCPToolbox:
    """A toolbox of the odd server, listing ``tools`` as given (``spawn``: see the server)."""
    config = json.dumps({"tools": tools, "spawn": spawn})
    return MCPToolbox.stdio(ODD_SERVER[0], [*ODD_SERVER[1:], config], env=_env(), **options)


class _Counter(BaseHTTPRequestHandler):
    """Answers every GET with a schema, counting them."""

    gets: list[str]

    def do_GET(self) -> None:
        self.gets.append(self.path)
        body = b'{"type": "object"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A plain HTTP server on 127.0.0.1 (in a thread): its URL, and the paths it was asked for."""
    gets: list[str] = []
    handler = type("Counter", (_Counter,), {"gets": gets})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", gets
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_a_schema_referencing_another_document_is_refused_and_never_fetched(
    schema_host: tuple[str, list[str]],
) -> None:
    url, gets = schema_host
    remote = {
        "type": "object",
        "properties": {"path": {"$ref": f"{url}/internal/x.json"}},
    }
    tools = [{"name": "read", "inputSchema": remote}, {"name": "add", "inputSchema": NUMBER}]
    with pytest.raises(ConfigurationError) as caught:
        async with odd_toolbox(tools) as opened:
            await opened.call(call("read", {"path": "/etc/passwd"}))
    message = str(caught.value)
    assert "the MCP server stdio:" in message
    assert "tool 'read' has an input schema that cannot be followed" in message
    assert f"its $ref '{url}/internal/x.json' refers to a document outside the schema" in message
    assert "remote references are never fetched" in message
    assert "include=['add']" in message
    # A reference relative to the schema (no $id: no document to be relative to) neither.
    relative = [{"name": "read", "inputSchema": {"$ref": "x.json"}}]
    with pytest.raises(ConfigurationError, match=r"its \$ref 'x\.json' refers to a document"):
        async with odd_toolbox(relative):
            pass
    assert gets == []

    # include= leaves the tool out; the others are offered and called.
    async with odd_toolbox(tools, include=["add"]) as opened:
        answer = await opened.call(call("add", {"n": 1}))
        wrong = await opened.call(call("add", {"n": "one"}))
    assert [spec.name for spec in opened.specs] == ["add"]
    assert answer.content == "ok"
    assert "n: 'one' is not of type 'integer'" in wrong.content
    assert gets == []


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "#"}, "its references loop back to where they started"),
        (
            {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}},
            "its references loop back to where they started",
        ),
        (
            {"properties": {"x": {"$ref": "#/$defs/missing"}}},
            "its \\$ref '#/\\$defs/missing' points nowhere in the schema",
        ),
        (
            {"required": ["x"], "properties": {"x": {"$ref": "#/required"}}},
            "its \\$ref '#/required' points at something that is not a schema",
        ),
    ],
    ids=["self", "mutual", "nowhere", "not-a-schema"],
)
async def test_a_schema_that_cannot_be_followed_is_refused_naming_the_tool(
    schema: dict[str, Any], problem: str
) -> None:
    tools = [{"name": "add", "inputSchema": NUMBER}, {"name": "loop", "inputSchema": schema}]
    with pytest.raises(ConfigurationError, match=f"tool 'loop' has an input schema .*{problem}"):
        async with odd_toolbox(tools):
            pass


async def test_local_references_and_recursive_schemas_are_followed() -> None:
    tree = {
        "type": "object",
        "$defs": {"label": {"$anchor": "label", "type": "string"}},
        "properties": {
            "name": {"$ref": "#label"},
            "children": {"type": "array", "items": {"$ref": "#"}},
            "size": {"$ref": "#/$defs/size"},
        },
    }
    tree["$defs"]["size"] = {"type": "integer"}  # type: ignore[index]
    async with odd_toolbox([{"name": "tree", "inputSchema": tree}]) as opened:
        good = await opened.call(call("tree", {"name": "a", "children": [{"name": "b"}]}))
        bad = await opened.call(call("tree", {"children": [{"children": [{"size": "big"}]}]}))
    assert good.content == "ok"
    assert bad.is_error
    assert "children.0.children.0.size: 'big' is not of type 'integer'" in bad.content


async def test_a_tool_with_an_empty_name_is_refused_naming_the_server() -> None:
    tools = [{"name": "", "inputSchema": NUMBER}, {"name": "add", "inputSchema": NUMBER}]
    with pytest.raises(ConfigurationError) as caught:
        async with odd_toolbox(tools, prefix="srv_"):
            pass
    message = str(caught.value)
    assert "the MCP server stdio:" in message
    assert "lists a tool with an empty name" in message
    assert "include=['add']" in message
    async with odd_toolbox(tools, include=["add"]) as opened:
        assert [spec.name for spec in opened.specs] == ["add"]


async def test_a_hung_call_is_an_observation_for_the_model(shared_url: str) -> None:
    model = ScriptedModel([call("hang", id="h1"), "the tool hangs; no answer"])
    tools = toolbox("http", shared_url, timeout=0.3, include=["hang", "add"])
    agent = react_agent(model, tools)
    async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
        result = await system.run(agent, ReactState(task="hang"))
    assert result.ok, result.failure
    assert result.state.answer == "the tool hangs; no answer"
    answers = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert [(m.name, m.is_error) for m in answers] == [("hang", True)]
    assert answers[0].content.startswith("Error after 1 attempt: tool 'hang' did not finish")
    assert tools.statistics().exhausted == 1
    assert tools.statistics().raised == 0


async def test_a_hung_call_of_a_tool_with_side_effects_escalates(shared_url: str) -> None:
    effects = toolbox("http", shared_url, timeout=0.3, effects={"hang": "idempotent"})
    read = toolbox("http", shared_url, timeout=0.3)
    async with effects, read:
        with pytest.raises(ToolTimeout, match=r"tool 'hang' did not finish within 0\.3 s"):
            await effects.call(call("hang"), on_exhausted="observe")
        answer = await read.call(call("hang"), on_exhausted="observe")
        with pytest.raises(ToolTimeout):  # escalated, by the call's on_exhausted
            await read.call(call("hang"))
    assert answer.is_error
    assert "did not finish within 0.3 s" in answer.content


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            stat = file.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="the reaper is Linux's (a child subreaper)")
async def test_a_process_the_server_started_in_a_session_of_its_own_is_stopped_with_it(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "child.pid"
    async with odd_toolbox([{"name": "add", "inputSchema": NUMBER}], spawn=str(pidfile)) as tools:
        assert (await tools.call(call("add", {"n": 1}))).content == "ok"
        child = int(pidfile.read_text())
        assert _alive(child)
        assert os.getsid(child) == child  # setsid: out of the server's session and group
    for _ in range(250):  # the toolbox is closed: it goes within 5 s
        if not _alive(child):
            break
        await anyio.sleep(0.02)
    else:
        os.kill(child, 9)
        pytest.fail(f"the server's child {child} (setsid) outlived the toolbox")
