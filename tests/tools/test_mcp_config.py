"""`MCPToolbox`'s arguments, its results as text, and its failures' classes: no server needed."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
    CallToolResult,
    TextContent,
)

from arkhon_rheo import ConfigurationError, Fatal, Transient
from arkhon_rheo.errors import ToolTimeout
from arkhon_rheo.protocols import ToolRunner, ToolSpec
from arkhon_rheo.tools import MCPToolbox, Toolbox
from arkhon_rheo.tools._mcp_link import classify, observation
from arkhon_rheo.tools._mcp_results import model_name, result_text

if TYPE_CHECKING:
    from collections.abc import Callable

LABEL = "http://127.0.0.1:1/mcp"


def test_without_the_sdk_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` fails as if not installed
    makers: list[Callable[[], object]] = [
        lambda: MCPToolbox.stdio("server"),
        lambda: MCPToolbox.http("http://127.0.0.1/mcp"),
    ]
    for make in makers:
        with pytest.raises(ConfigurationError, match='pip install "arkhon-rheo\\[mcp\\]"'):
            make()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: MCPToolbox.stdio(""), "needs a command"),
        (lambda: MCPToolbox.stdio("npx", "server --flag"), "not one string"),
        (lambda: MCPToolbox.http("127.0.0.1:8000/mcp"), "needs an http:// or https:// URL"),
        (lambda: MCPToolbox.http("ftp://x:hunter2-pw@host/"), "ftp://x:\\[REDACTED\\]@host/"),
        (lambda: MCPToolbox.stdio("s", timeout=0), "timeout must be a positive number"),
        (lambda: MCPToolbox.stdio("s", timeout=True), "timeout must be a positive number"),
        (lambda: MCPToolbox.stdio("s", connect_timeout=None), "connect_timeout must be a"),
        (lambda: MCPToolbox.stdio("s", prefix=3), "prefix must be a str"),
        (lambda: MCPToolbox.stdio("s", include="add"), "write include=\\['add'\\]"),
        (lambda: MCPToolbox.stdio("s", concurrency=0), "concurrency must be an int"),
        (lambda: MCPToolbox.stdio("s", effects={"rm": "maybe"}), "rm"),
        (lambda: MCPToolbox.stdio("s", policies={"x": "maybe"}), "tool 'x': the run policy"),
        (lambda: MCPToolbox.stdio("s", default_policy="ask"), "'allow', 'approve', 'block'"),
        (lambda: MCPToolbox("server"), "made by MCPToolbox.stdio or MCPToolbox.http"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_are_configuration_errors(make: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


def test_it_is_a_toolbox_and_a_tool_runner_with_the_specs_given() -> None:
    spec = ToolSpec(name="add", description="Add.", parameters={"type": "object"})
    tools = MCPToolbox.stdio("server", ["--x"], specs=[spec], timeout=None)
    assert isinstance(tools, Toolbox)
    assert isinstance(tools, ToolRunner)
    assert list(tools.specs) == [spec]
    assert tools.timeout is None
    assert not tools.is_open
    assert repr(tools) == "<MCPToolbox stdio:server --x: add>"


def test_secrets_in_env_and_url_are_masked() -> None:
    tools = MCPToolbox.stdio(
        "server", ["--token", "tok-123456789"], env={"API_TOKEN": "tok-123456789"}
    )
    assert "tok-123456789" not in repr(tools)
    query = MCPToolbox.http("https://host/mcp?api_key=k-abcdef123&x=1")
    assert query.server.label == "https://host/mcp?api_key=[REDACTED]&x=1"


def test_tool_names_are_made_fit_for_model_apis() -> None:
    assert model_name("", "add") == "add"
    assert model_name("gh.", "repos/list issues") == "gh_repos_list_issues"
    assert len(model_name("", "x" * 100)) == 64


def test_results_become_text() -> None:
    plain = CallToolResult(
        content=[TextContent(type="text", text="one"), TextContent(type="text", text="two")]
    )
    assert result_text(plain) == "one\ntwo"
    assert result_text(CallToolResult(content=[])) == "(no content)"
    structured = CallToolResult(
        content=[TextContent(type="text", text='{"a": 1}')], structured_content={"a": 1}
    )
    assert result_text(structured) == '{"a":1}'


def error(code: int, message: str = "boom") -> MCPError:
    return MCPError(code=code, message=message)


@pytest.mark.parametrize(
    ("exc", "kind", "match"),
    [
        (error(CONNECTION_CLOSED), Transient, "closed the connection"),
        (error(REQUEST_TIMEOUT), ToolTimeout, "did not finish within 5 s"),
        (error(INTERNAL_ERROR), Transient, "retrying may help"),
        (error(INVALID_REQUEST, "Session not found"), Transient, "no longer knows"),
        (error(METHOD_NOT_FOUND), Fatal, "endpoint is usually /mcp"),
        (error(UNSUPPORTED_PROTOCOL_VERSION), Fatal, "another MCP version"),
        (error(INVALID_REQUEST), Fatal, "refused the request \\(error -32600"),
        (ConnectionRefusedError("refused"), Transient, "is unreachable"),
        (BrokenPipeError("pipe"), Transient, "is unreachable"),
        (ExceptionGroup("g", [ConnectionResetError("reset")]), Transient, "ConnectionResetError"),
        (FileNotFoundError("no such file"), Fatal, "check the command"),
        (TimeoutError(), Transient, "did not answer the handshake in time"),
        (RuntimeError("odd"), Fatal, "RuntimeError: odd; fix the server"),
    ],
)
def test_failures_are_classified(exc: Exception, kind: type[Exception], match: str) -> None:
    failure = classify(exc, LABEL, tool="add", timeout=5.0)
    assert type(failure) is kind
    assert re.search(match, str(failure)), str(failure)


def test_a_call_the_server_refuses_for_its_params_is_the_models_to_fix() -> None:
    assert observation(error(INVALID_PARAMS, "Unknown tool: x")) == (
        "the server refused the call (Unknown tool: x)"
    )
    assert observation(error(INTERNAL_ERROR)) is None
    assert observation(ConnectionResetError()) is None
