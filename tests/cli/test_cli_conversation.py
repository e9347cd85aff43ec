"""A conversation over the command line: ``run --text``, then ``send`` from other processes.

Each command drives a real-model conversational agent (`tests.support.real_agent`)
against a loopback OpenAI-compatible server: the session parks in the store between
turns, and each command wakes it, applies the user's message and prints the reply.
In the three-turn test each ``send`` is a process of its own (``python -m
arkhon_rheo``); the other commands run ``main(argv)`` in this process (`cli`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.react import Conversation
from arkhon_rheo.store import SQLiteStore
from tests.cli.test_cli_real_model import cli
from tests.support.chat_server import Canned, open_chat_server
from tests.support.real_agent import URL_VARIABLE, conversational_agent

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

CHAT = "tests.support.real_agent:conversational_agent"


def said(request: Any) -> list[tuple[str, str]]:
    """The conversation a request sent the model: (role, content) of each message."""
    return [(m["role"], m.get("content") or "") for m in request.json["messages"]]


async def test_three_turns_from_three_processes_keep_one_conversation(
    tmp_path: Path, anyio_backend: str
) -> None:
    db = str(tmp_path / "chat.db")
    async with open_chat_server() as server:
        server.add(Canned.completion("Hi! What can I do?"))
        code, first, err = await cli(
            server, anyio_backend, "run", CHAT, "--text", "hello", "--session-id", "c1",
            "--store", db,
        )  # fmt: skip
        assert code == 0, err
        assert first["exit_reason"] == "waiting"
        assert first["reply"] == "Hi! What can I do?"

        code, listed, err = await cli(server, anyio_backend, "sessions", "--status", "waiting",
                                      "--store", db)  # fmt: skip
        assert code == 0, err
        assert [s["session_id"] for s in listed] == ["c1"]
        assert listed[0]["waiting"]["accepts"] == ["close", "user_input"]

        turns = [
            ("what is 2 + 3?", [Canned.completion(tool_calls=[("t1", "add", '{"a": 2, "b": 3}')]),
                                Canned.completion("5.")], "5."),
            ("and 5 + 5?", [Canned.completion("10.")], "10."),
            ("thanks", [Canned.completion("Any time.")], "Any time."),
        ]  # fmt: skip
        for text, replies, reply in turns:
            server.add(*replies)
            code, sent, err = await cli(
                server, anyio_backend, "send", "c1", "--machine", CHAT, "--text", text,
                "--store", db, process=True,
            )  # fmt: skip
            assert code == 0, err
            assert sent["exit_reason"] == "waiting"
            assert sent["reply"] == reply
        # Each process sent the model the whole conversation so far.
        last = said(server.requests[-1])
        users = [content for role, content in last if role == "user"]
        assert users == ["hello", "what is 2 + 3?", "and 5 + 5?", "thanks"]
        assistants = [content for role, content in last if role == "assistant"]
        assert assistants[-1] == "10."
        assert ("tool", '{"sum": 5') in [(role, content[:9]) for role, content in last]

        code, closed, err = await cli(
            server, anyio_backend, "send", "c1", "--machine", CHAT, "--message",
            '{"kind": "close"}', "--store", db,
        )  # fmt: skip
        assert code == 0, err
        assert closed["exit_reason"] == "finished"
        assert closed["reply"] == "Any time."

    async with SQLiteStore(db) as store:
        assert (await store.record("c1")).status == "finished"
        applied = [e for e in await store.history("c1") if e.io and "message" in e.io]
        assert [e.io["message"]["kind"] for e in applied] == [
            "user_input", "user_input", "user_input", "close",
        ]  # fmt: skip


async def test_send_refuses_bad_messages_and_unknown_sessions(
    tmp_path: Path, anyio_backend: str
) -> None:
    db = str(tmp_path / "chat.db")
    async with open_chat_server() as server:
        server.add(Canned.completion("Hi!"))
        code, _, err = await cli(
            server, anyio_backend, "run", CHAT, "--text", "hello", "--session-id", "c1",
            "--store", db,
        )  # fmt: skip
        assert code == 0, err
        code, _, err = await cli(
            server, anyio_backend, "send", "nobody", "--machine", CHAT, "--text", "hi",
            "--store", db,
        )  # fmt: skip
        assert code == 3, err
        code, _, err = await cli(
            server, anyio_backend, "send", "c1", "--machine", CHAT, "--message",
            '{"kind": "shout", "text": "HI"}', "--store", db,
        )  # fmt: skip
        assert code == 1
        assert "not one it accepts" in err
        code, _, err = await cli(
            server, anyio_backend, "send", "c1", "--machine", CHAT, "--message",
            '{"kind": "user_input"}', "--store", db,
        )  # fmt: skip
        assert code == 1
        assert "text: Field required" in err
        code, _, err = await cli(
            server, anyio_backend, "send", "c1", "--machine", CHAT, "--store", db,
        )  # fmt: skip
        assert code == 2
        assert len(server.requests) == 1  # nothing else reached the model
    async with SQLiteStore(db) as store:
        assert await store.messages("c1") == ()  # nothing stored


async def test_run_text_needs_a_task_field(tmp_path: Path, anyio_backend: str) -> None:
    db = str(tmp_path / "chat.db")
    async with open_chat_server() as server:
        code, _, err = await cli(
            server, anyio_backend, "run", "arkhon_rheo.testing:reference_machine", "--text",
            "hi", "--store", db,
        )  # fmt: skip
        assert code == 2
        assert "has no 'task' field" in err


async def test_a_conversation_in_process_drives_the_same_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_chat_server() as server:
        monkeypatch.setenv(URL_VARIABLE, server.url)
        agent = conversational_agent()  # its client, unopened: the system opens it
        server.add(Canned.completion("one"), Canned.completion("two"))
        async with AgentSystem(path=tmp_path / "x.db") as system:
            chat = Conversation(system, agent)
            assert await chat.start("a") == "one"
            assert await chat.say("b") == "two"
