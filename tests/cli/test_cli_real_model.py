"""Every steering command drives a real-model agent named by ``MODULE:ATTR``, with no user code.

`tests.support.real_agent` makes ``react_agent(OpenAIChatClient(...), ...)`` at
import and never opens the client; the agent system each command opens does.
Each command runs through ``main(argv)`` on a thread of its own, the agent's module
imported afresh, against a loopback OpenAI-compatible server this test serves
(`tests.support.chat_server`); `tests/cli/test_cli_conversation.py` runs commands as
processes of their own (``python -m arkhon_rheo``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from arkhon_rheo.cli import main
from arkhon_rheo.store import SQLiteStore
from tests.support.anthropic_server import message
from tests.support.chat_server import Canned, ChatServer, open_chat_server
from tests.support.real_agent import KEY, PROVIDER_VARIABLE, URL_VARIABLE

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.support.real_agent:agent"
GATED = "tests.support.real_agent:gated_agent"
REAL_AGENT = "tests.support.real_agent"


async def cli(
    server: ChatServer, backend: str, *argv: str, provider: str = "openai", process: bool = False
) -> tuple[int, Any, str]:
    """Run ``arkhon-rheo ARGV --json``; its status, JSON output, stderr.

    In this process by default: ``main(argv)`` on a thread of its own (so its own event
    loop, beside the test's that serves the model), with the agent's module imported
    afresh under the server's environment, as a new process would. With ``process``, as
    a process of its own (``python -m arkhon_rheo``), for what only processes show.
    """
    url = server.root if provider == "anthropic" else server.url
    variables = {URL_VARIABLE: url, PROVIDER_VARIABLE: provider}
    command = [*argv, "--backend", backend, "--json"]
    with anyio.fail_after(120):  # a hung command, not a timing threshold
        if process:
            env = {**os.environ, **variables, "PYTHONPATH": str(ROOT)}
            env.pop("OPENAI_API_KEY", None)
            env.pop("ANTHROPIC_API_KEY", None)
            done = await anyio.run_process(
                [sys.executable, "-m", "arkhon_rheo", *command], cwd=ROOT, env=env, check=False
            )
            code, out, err = done.returncode, done.stdout.decode(), done.stderr.decode()
        else:
            code, out, err = await anyio.to_thread.run_sync(in_process, command, variables)
    assert "Traceback" not in err, err
    return code, (json.loads(out) if out.strip() else None), err


def in_process(command: list[str], variables: dict[str, str]) -> tuple[int, str, str]:
    """``main(command)`` under ``variables`` (no API key), the agent's module imported afresh."""
    saved = dict(os.environ)
    os.environ.update(variables)
    os.environ.pop("OPENAI_API_KEY", None)
    os.environ.pop("ANTHROPIC_API_KEY", None)
    sys.modules.pop(REAL_AGENT, None)  # its agents are made at import, from the environment
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(command)
    finally:
        sys.modules.pop(REAL_AGENT, None)
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def tool_result(state: dict[str, Any]) -> dict[str, Any]:
    (message,) = [m for m in state["messages"] if m["role"] == "tool"]
    result: dict[str, Any] = json.loads(message["content"])
    return result


async def status(path: Path, session_id: str) -> str:
    async with SQLiteStore(path) as store:
        return (await store.record(session_id)).status


async def test_run_decide_fork_and_resume_drive_a_real_model_agent(
    tmp_path: Path, anyio_backend: str
) -> None:
    db = str(tmp_path / "real.db")
    async with open_chat_server() as server:
        # run: a tool call, then the answer; the client is opened by the command's system.
        server.add(
            Canned.completion(tool_calls=[("c-1", "add", '{"a": 2, "b": 3}')]),
            Canned.completion("2 + 3 = 5"),
        )
        code, ran, err = await cli(
            server, anyio_backend, "run", AGENT, "--input", '{"task": "add 2 and 3"}',
            "--session-id", "s1", "--store", db,
        )  # fmt: skip
        assert code == 0, err
        assert ran["exit_reason"] == "finished", ran["failure"]
        assert ran["state"]["answer"] == "2 + 3 = 5"
        seen = tool_result(ran["state"])
        assert seen == {"sum": 5, "session": "s1", "step": 3, "call": "c-1", "model_open": True}

        # run a gated agent: it pauses before its tool call.
        server.add(Canned.completion(tool_calls=[("c-2", "add", '{"a": 1, "b": 1}')]))
        code, paused, err = await cli(
            server, anyio_backend, "run", GATED, "--input", '{"task": "1 + 1"}',
            "--session-id", "g1", "--store", db,
        )  # fmt: skip
        assert (code, paused["exit_reason"]) == (0, "paused"), err

        # decide resume: the tool runs, then the model answers, in the deciding process.
        server.add(Canned.completion("two"))
        code, decided, err = await cli(
            server, anyio_backend, "decide", "g1", "resume", "--machine", GATED, "--store", db
        )
        assert code == 0, err
        assert decided["exit_reason"] == "finished", decided["failure"]
        assert decided["state"]["answer"] == "two"
        assert tool_result(decided["state"])["session"] == "g1"

        # fork the finished session where it was thinking, and resume the fork.
        code, forked, err = await cli(
            server, anyio_backend, "fork", "g1", "--at", "1", "--new-id", "f1",
            "--machine", GATED, "--store", db,
        )  # fmt: skip
        assert (code, forked["session_id"]) == (0, "f1"), err
        server.add(Canned.completion("still two"))
        code, resumed, err = await cli(
            server, anyio_backend, "resume", "f1", "--machine", GATED, "--store", db
        )
        assert code == 0, err
        assert resumed["exit_reason"] == "finished", resumed["failure"]
        assert resumed["state"]["answer"] == "still two"

    assert len(server.requests) == 5
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    for session_id in ("s1", "g1", "f1"):
        assert await status(Path(db), session_id) == "finished"


async def test_run_and_decide_drive_a_real_anthropic_agent(
    tmp_path: Path, anyio_backend: str
) -> None:
    db = str(tmp_path / "anthropic.db")
    async with open_chat_server() as server:
        server.add(
            message(tool_uses=[("tu_1", "add", {"a": 2, "b": 3})]),
            message("2 + 3 = 5", usage=(20, 6, 0, 40)),
        )
        code, ran, err = await cli(
            server, anyio_backend, "run", AGENT, "--input", '{"task": "add 2 and 3"}',
            "--session-id", "a1", "--store", db, provider="anthropic",
        )  # fmt: skip
        assert code == 0, err
        assert ran["exit_reason"] == "finished", ran["failure"]
        assert ran["state"]["answer"] == "2 + 3 = 5"
        assert tool_result(ran["state"])["sum"] == 5
        assert ran["state"]["usage"]["cache_read_tokens"] == 40

        server.add(message(tool_uses=[("tu_2", "add", {"a": 1, "b": 1})]), message("two"))
        code, paused, err = await cli(
            server, anyio_backend, "run", GATED, "--input", '{"task": "1 + 1"}',
            "--session-id", "a2", "--store", db, provider="anthropic",
        )  # fmt: skip
        assert (code, paused["exit_reason"]) == (0, "paused"), err
        code, decided, err = await cli(
            server, anyio_backend, "decide", "a2", "resume", "--machine", GATED,
            "--store", db, provider="anthropic",
        )  # fmt: skip
        assert code == 0, err
        assert decided["state"]["answer"] == "two"

    assert [r.path for r in server.requests] == ["/v1/messages"] * 4
    assert all(r.headers["x-api-key"] == KEY for r in server.requests)
    assert server.requests[1].json["messages"][-1]["content"][0]["tool_use_id"] == "tu_1"


async def test_a_resource_that_cannot_open_fails_the_command_not_the_session(
    tmp_path: Path, anyio_backend: str
) -> None:
    db = str(tmp_path / "closed.db")
    async with open_chat_server() as server:
        code, _, err = await cli(
            server, anyio_backend, "run", "tests.support.real_agent:broken_agent",
            "--input", '{"task": "x"}', "--session-id", "c1", "--store", db,
        )  # fmt: skip
    assert code == 1
    assert "ResourceUnavailable" not in err  # one line: the message says it all
    assert "resource 'db' of machine 'real-agent' could not be opened" in err
    assert "ConnectionRefusedError: the database at 127.0.0.1:9 refused" in err
    assert server.requests == []
    async with SQLiteStore(db) as store:
        assert await store.sessions() == ()  # nothing stored, let alone stored as failed
