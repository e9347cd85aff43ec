"""The chat service of examples/chat_service.py under real load, and asks across processes.

Real servers on loopback (uvicorn on asyncio, hypercorn on trio), real
processes on one store: 200 concurrent requests over 20 threads, every reply
matched to its own message (the model repeats the user's words), every
message applied once, every transcript whole and in its inbox's order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.react import UserInput
from arkhon_rheo.store import SQLiteStore
from tests.support.ask_agent import agent as ask_agent

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
THREADS, PER_THREAD = 20, 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(store: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**env, "PYTHONPATH": path, "ARKHON_RHEO_STORE": store}


@contextlib.contextmanager
def processes(commands: list[list[str]], store: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start each command (a server, a worker) on ``store``; stop them all at the end."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=_env(store),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            started.append(process)
        yield started
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()


def server(backend: str, port: int) -> list[str]:
    if backend == "trio":
        return [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "-b",
                f"127.0.0.1:{port}", "examples.chat_service:app"]  # fmt: skip
    return [sys.executable, "-m", "uvicorn", "examples.chat_service:app", "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning"]  # fmt: skip


def worker(store: str, backend: str) -> list[str]:
    return [sys.executable, "-m", "arkhon_rheo", "worker", "--store", store, "--machine",
            "examples.chat_service:agent", "--backend", backend, "--poll", "0.2"]  # fmt: skip


async def _ready(client: httpx.AsyncClient, port: int, process: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(60):
        while True:
            if process.poll() is not None:
                raise AssertionError(process.stderr.read().decode() if process.stderr else "died")
            try:
                await client.get(f"http://127.0.0.1:{port}/threads/none")
                return
            except httpx.TransportError:
                await anyio.sleep(0.1)


async def talk_to(ports: list[int], started: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    """200 concurrent requests over 20 threads, spread over the servers; what came back."""
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        for port, process in zip(ports, started, strict=False):
            await _ready(client, port, process)
        replies: dict[tuple[str, str], Any] = {}

        async def one(n: int, thread: str, text: str) -> None:
            port = ports[n % len(ports)]
            response = await client.post(
                f"http://127.0.0.1:{port}/threads/{thread}/messages", json={"text": text}
            )
            replies[(thread, text)] = (response.status_code, response.json())

        async with anyio.create_task_group() as group:
            n = 0
            for i in range(PER_THREAD):
                for t in range(THREADS):
                    group.start_soon(one, n, f"thread-{t}", f"t{t} message {i}")
                    n += 1
        transcripts = {}
        for t in range(THREADS):
            port = ports[t % len(ports)]
            got = await client.get(f"http://127.0.0.1:{port}/threads/thread-{t}")
            assert got.status_code == 200, got.text
            transcripts[f"thread-{t}"] = got.json()["messages"]
        missing = await client.get(f"http://127.0.0.1:{ports[0]}/threads/nobody")
        assert missing.status_code == 404
    return {"replies": replies, "transcripts": transcripts}


def check(outcome: dict[str, Any], inboxes: dict[str, list[str]]) -> None:
    """0 errors, each reply its own message's, each message once, in its inbox's order."""
    replies = outcome["replies"]
    assert len(replies) == THREADS * PER_THREAD
    errors = {key: got for key, got in replies.items() if got[0] != 200}
    assert not errors
    for (_, text), (_, body) in replies.items():
        assert body["reply"] == f"You said: {text}"
    for thread, said in outcome["transcripts"].items():
        users = [m["text"] for m in said if m["role"] == "user"]
        assert sorted(users) == sorted(f"t{thread[7:]} message {i}" for i in range(PER_THREAD))
        assert users == inboxes[thread]  # applied in the order the inbox took them
        for index, message in enumerate(said):
            expected = "user" if index % 2 == 0 else "assistant"
            assert message["role"] == expected, said
            if expected == "assistant":
                assert message["text"] == f"You said: {said[index - 1]['text']}"


async def _inboxes(store: Any) -> dict[str, list[str]]:
    inboxes = {}
    async with store:
        for t in range(THREADS):
            messages = await store.messages(f"thread-{t}")
            assert all(m.applied_seq is not None for m in messages)
            ordered = sorted(messages, key=lambda m: m.position)
            inboxes[f"thread-{t}"] = [m.payload["text"] for m in ordered]
    return inboxes


@pytest.mark.parametrize("servers", [1, 2], ids=["one-process", "two-processes"])
async def test_200_concurrent_requests_on_sqlite(
    servers: int, anyio_backend: str, tmp_path: Path
) -> None:
    backend = anyio_backend if isinstance(anyio_backend, str) else anyio_backend[0]
    store = str(tmp_path / "chat.db")
    ports = [_free_port() for _ in range(servers)]
    with processes([server(backend, port) for port in ports], store) as started:
        outcome = await talk_to(ports, started)
    check(outcome, await _inboxes(SQLiteStore(store)))


async def test_200_concurrent_requests_two_services_two_workers_on_postgres(
    anyio_backend: str, postgres_url: str
) -> None:
    from arkhon_rheo.store import PostgresStore

    backend = anyio_backend if isinstance(anyio_backend, str) else anyio_backend[0]
    ports = [_free_port(), _free_port()]
    commands = [server(backend, port) for port in ports]
    commands += [worker(postgres_url, backend) for _ in range(2)]
    with processes(commands, postgres_url) as started:
        outcome = await talk_to(ports, started)
    check(outcome, await _inboxes(PostgresStore(postgres_url)))


async def test_an_ask_gets_its_reply_after_the_driving_process_is_killed(
    anyio_backend: str, tmp_path: Path
) -> None:
    backend = anyio_backend if isinstance(anyio_backend, str) else anyio_backend[0]
    store = str(tmp_path / "kill.db")
    env = {**_env(store), "ASK_HOLD": "1"}
    child = subprocess.Popen(  # noqa: ASYNC220 - started before anything runs
        [sys.executable, "-m", "tests.support.ask_agent", store, backend],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"driving"  # the turn of k1 is under way
        async with AgentSystem(path=store) as system:
            got: list[Any] = []

            async def asking() -> None:  # another process's turn: wait for it, drive nothing
                got.append(
                    await system.ask(
                        ask_agent, "k", UserInput(text="slow"), message_id="k1", drive=False
                    )
                )

            async with anyio.create_task_group() as group:
                group.start_soon(asking)
                await anyio.sleep(0.2)
                assert not got
                child.send_signal(signal.SIGKILL)
                child.wait()
                started = time.monotonic()
                while not await system.recover(ask_agent):  # it resumes the dead one's session
                    assert time.monotonic() - started < 30
                    await anyio.sleep(0.05)
            (reply,) = got
            assert reply.value == "You said: slow"
            assert reply.duplicate
            again = await system.ask(ask_agent, "k", UserInput(text="slow"), message_id="k1")
            assert (again.seq, again.value) == (reply.seq, reply.value)
            assert [m.message_id for m in await system.store.messages("k")] == ["k1"]  # type: ignore[union-attr]
            applied = [
                e
                for e in await system.stored(ask_agent, "k").history()
                if e.info and e.info.get("message", {}).get("id") == "k1"
            ]
            assert len(applied) == 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
