"""Agents served over A2A, driven by the a2a-sdk's own client over real HTTP on loopback.

In-process servers (Hypercorn on the test's backend, the app `a2a_app`
returns) for the protocol's methods, and ``arkhon-rheo serve`` processes
for durability: a server killed mid-turn and started again, and two servers
on one PostgreSQL answering for one context.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

pytest.importorskip("a2a", reason="the a2a extra (a2a-sdk) is not installed")

from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
)

from arkhon_rheo import AgentSystem
from arkhon_rheo.inspector._seams import listen, serve_asgi
from arkhon_rheo.serve import a2a_app
from tests.support import a2a_agent
from tests.support.a2a_agent import agent, gated

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.support.a2a_agent:agent"
DONE = (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED)


@contextlib.asynccontextmanager
async def served(path: Path, agents: Any = (agent, gated), **options: Any) -> AsyncIterator[str]:
    """The agents served by an in-process server on a free port; its base URL."""
    async with AgentSystem(store=str(path), machines=[agent, gated]) as system:
        app = a2a_app(system, list(agents), **options)
        sock = listen("127.0.0.1", 0)
        port = sock.getsockname()[1]
        async with anyio.create_task_group() as group:
            ready = anyio.Event()
            group.start_soon(serve_asgi, app, sock, ready.set)
            await ready.wait()
            yield f"http://127.0.0.1:{port}"
            group.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def client_of(url: str, *, streaming: bool = False, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
        yield await factory.create_from_url(url)


def said(text: str, message_id: str, **fields: Any) -> pb.SendMessageRequest:
    message = pb.Message(
        message_id=message_id, role=pb.ROLE_USER, parts=[pb.Part(text=text)], **fields
    )
    return pb.SendMessageRequest(message=message)


async def send(client: Client, request: pb.SendMessageRequest) -> pb.Task:
    tasks = [event.task async for event in client.send_message(request)]
    (task,) = tasks
    return task


def text_of(task: pb.Task) -> str:
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


async def until(client: Client, task_id: str, states: Any = DONE, limit: float = 30) -> pb.Task:
    with anyio.fail_after(limit):
        while True:
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            if task.status.state in states:
                return task
            await anyio.sleep(0.05)


async def test_card_send_get_and_a_conversation_of_several_messages(tmp_path: Path) -> None:
    async with served(tmp_path / "a.db") as url, httpx.AsyncClient() as http:
        index = (await http.get(f"{url}/")).json()
        assert [each["name"] for each in index["agents"]] == ["repeat", "gated"]
        card = (await http.get(f"{url}/repeat/.well-known/agent-card.json")).json()
        assert card["name"] == "repeat"
        assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
        assert [skill["id"] for skill in card["skills"]] == ["wait"]
        assert card["supportedInterfaces"][0]["url"] == f"{url}/repeat/"
        async with client_of(f"{url}/repeat") as client:
            first = await send(client, said("hello", "m1"))
            assert first.status.state == pb.TASK_STATE_COMPLETED
            assert text_of(first) == "You said: hello"
            context = first.context_id
            tasks = [first]
            for n in (2, 3):
                task = await send(client, said(f"number {n}", f"m{n}", context_id=context))
                assert (task.context_id, text_of(task)) == (context, f"You said: number {n}")
                tasks.append(task)
            again = await send(client, said("hello", "m1", context_id=context))  # a retry
            assert (again.id, text_of(again)) == (first.id, "You said: hello")
            for task in tasks:
                got = await client.get_task(pb.GetTaskRequest(id=task.id))
                assert got.status.state == pb.TASK_STATE_COMPLETED
                assert (got.context_id, text_of(got)) == (context, text_of(task))
                assert got.history[0].parts[0].text == task.history[0].parts[0].text
            assert len({task.id for task in tasks}) == 3
            with pytest.raises(TaskNotFoundError):
                await client.get_task(pb.GetTaskRequest(id="nothing-of-ours"))
        async with client_of(f"{url}/gated") as other:  # another agent's task is not its own
            with pytest.raises(TaskNotFoundError):
                await other.get_task(pb.GetTaskRequest(id=first.id))


async def test_streamed_deltas_arrive_before_the_turn_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = anyio.Event()  # the model waits after its first word until the client has it
    monkeypatch.setattr(a2a_agent, "STREAM_GATE", gate)
    async with served(tmp_path / "s.db", [agent]) as url, client_of(url, streaming=True) as client:
        seen: list[tuple[str, Any]] = []
        with anyio.move_on_after(30) as waited:
            async for event in client.send_message(said("one two three four five", "s1")):
                kind = event.WhichOneof("payload")
                seen.append((kind, event))
                if kind == "artifact_update" and not gate.is_set():
                    assert event.artifact_update.artifact.parts[0].text == "You"
                    assert not any(
                        k == "status_update" and e.status_update.status.state in DONE
                        for k, e in seen
                    )
                    gate.set()  # only now may the turn go on and end
        kinds = [kind for kind, _ in seen]
        assert not waited.cancelled_caught, seen  # no delta came while the turn ran
        assert kinds[0] == "task"
        assert kinds[-1] == "status_update"
        deltas = [event.artifact_update for kind, event in seen if kind == "artifact_update"]
        words = "".join(part.text for delta in deltas for part in delta.artifact.parts)
        assert words == "You said: one two three four five"
        assert len(deltas) >= 7
        assert deltas[-1].last_chunk
        final = seen[-1][1].status_update
        assert final.status.state == pb.TASK_STATE_COMPLETED
        task = await client.get_task(pb.GetTaskRequest(id=final.task_id))
        assert text_of(task) == "You said: one two three four five"


async def test_cancel_cuts_the_turn_at_a_commit_boundary(tmp_path: Path) -> None:
    async with served(tmp_path / "c.db", [agent]) as url, client_of(url) as client:
        request = said("tool 0.5", "c1")
        request.configuration.return_immediately = True
        task = await send(client, request)
        assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
        await until(client, task.id, (pb.TASK_STATE_WORKING,))
        cancelled = await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        assert cancelled.status.state == pb.TASK_STATE_CANCELED
        assert not cancelled.artifacts
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        after = await send(client, said("still there?", "c2", context_id=task.context_id))
        assert text_of(after) == "You said: still there?"


async def test_a_subscription_follows_a_running_task_to_its_end(tmp_path: Path) -> None:
    async with served(tmp_path / "r.db", [agent]) as url, client_of(url, streaming=True) as client:
        request = said("tool 1", "r1")
        request.configuration.return_immediately = True
        async with client_of(url) as plain:
            task = await send(plain, request)
            await until(plain, task.id, (pb.TASK_STATE_WORKING,))
        events = [e async for e in client.subscribe(pb.SubscribeToTaskRequest(id=task.id))]
        assert events[0].task.status.state == pb.TASK_STATE_WORKING
        (artifact,) = [e.artifact_update for e in events if e.HasField("artifact_update")]
        assert artifact.artifact.parts[0].text == "done: waited 1.0"
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_a_gate_is_answered_through_input_required(tmp_path: Path) -> None:
    async with served(tmp_path / "g.db") as url, client_of(f"{url}/gated") as client:
        task = await send(client, said("tool 0.01", "g1"))
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "run the tool?"
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.status.state == pb.TASK_STATE_INPUT_REQUIRED
        with pytest.raises(InvalidParamsError, match="approve"):
            await send(client, said("maybe", "g2", task_id=task.id, context_id=task.context_id))
        with pytest.raises(TaskNotCancelableError, match="abort"):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        done = await send(
            client, said("approve", "g3", task_id=task.id, context_id=task.context_id)
        )
        assert (done.id, done.status.state) == (task.id, pb.TASK_STATE_COMPLETED)
        assert text_of(done) == "done: waited 0.01"
        with pytest.raises(InvalidParamsError, match="not input-required"):
            await send(client, said("approve", "g4", task_id=task.id, context_id=task.context_id))
        async with client_of(f"{url}/gated", streaming=True) as streaming:  # answered on a stream
            events = [e async for e in streaming.send_message(said("tool 0.01", "g5"))]
            paused = events[-1].status_update
            assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
            answer = said("approve", "g6", task_id=paused.task_id, context_id=paused.context_id)
            events = [e async for e in streaming.send_message(answer)]
            assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
            resubscribed = [
                e async for e in streaming.subscribe(pb.SubscribeToTaskRequest(id=paused.task_id))
            ]
            assert resubscribed[0].task.status.state == pb.TASK_STATE_COMPLETED


async def test_bad_requests_get_the_protocols_errors_and_a_token_is_needed(tmp_path: Path) -> None:
    async with served(tmp_path / "b.db", [agent], token="s3cret-token", max_body=4096) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            auth = {"Authorization": "Bearer s3cret-token"}
            assert (
                await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
            ).status_code == 401
            card = (await http.get("/.well-known/agent-card.json")).json()
            assert "bearer" in card["securitySchemes"]

            async def code(body: Any, raw: bool = False) -> int:
                sent = await http.post("/", content=body if raw else json.dumps(body), headers=auth)
                assert "Traceback" not in sent.text
                assert "s3cret-token" not in sent.text
                return int(sent.json()["error"]["code"])

            assert await code(b"{not json", raw=True) == -32700
            assert await code([{"jsonrpc": "2.0"}]) == -32600
            assert await code({"jsonrpc": "2.0", "id": 1}) == -32600
            assert await code({"jsonrpc": "2.0", "id": 1, "method": "Nope"}) == -32601
            assert (
                await code({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"bogus": 1}})
                == -32602
            )
            assert (
                await code({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
                == -32001
            )
            empty = {"message": {"messageId": "e1", "role": "ROLE_USER", "parts": []}}
            assert (
                await code({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": empty})
                == -32602
            )
            big = await http.post("/", content=b"x" * 5000, headers=auth)
            assert big.status_code == 413
        async with client_of(url, token="s3cret-token") as client:
            assert text_of(await send(client, said("hi", "t1"))) == "You said: hi"


def test_serve_refuses_an_address_other_machines_reach_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arkhon_rheo.cli import main

    store = str(tmp_path / "x.db")
    assert main(["serve", AGENT, "--store", store, "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    command = ["serve", AGENT, "--store", store, "--host", "0.0.0.0", "--allow-remote"]
    assert main(command) == 2
    assert "needs a token" in capsys.readouterr().err


# -- real server processes: killed and restarted, two on one PostgreSQL ----------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def servers(store: str, ports: list[int], backend: str, **env: str) -> Iterator[list[Any]]:
    """``arkhon-rheo serve`` on each port, started at once; stopped (SIGTERM) at the end."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "A2A_"))}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    started: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            command = [sys.executable, "-m", "arkhon_rheo", "serve", AGENT,
                       "--store", store, "--port", str(port), "--backend", backend,
                       "--recover-every", "0.5"]  # fmt: skip
            started.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env={**environ, "PYTHONPATH": path, **env},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        for process in started:
            assert process.stdout is not None
            line = process.stdout.readline().decode()
            assert "A2A on" in line, line + (
                process.stderr.read().decode() if process.stderr else ""
            )
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()


def _backend(anyio_backend: Any) -> str:
    return anyio_backend if isinstance(anyio_backend, str) else str(anyio_backend[0])


async def test_a_server_killed_mid_turn_and_started_again_finishes_the_task(
    anyio_backend: Any, tmp_path: Path
) -> None:
    backend, store, port = _backend(anyio_backend), str(tmp_path / "k.db"), _free_port()
    url = f"http://127.0.0.1:{port}"
    with servers(store, [port], backend, A2A_HOLD="1") as (first,):
        async with client_of(url) as client:
            request = said("hold", "k1")
            request.configuration.return_immediately = True
            task = await send(client, request)
        assert first.stdout is not None
        assert first.stdout.readline().strip() == b"holding"  # the turn is under way there
        first.send_signal(signal.SIGKILL)
        first.wait()
    with servers(store, [port], backend), anyio.fail_after(60):
        async with client_of(url) as client:
            done = await until(client, task.id)
            assert done.status.state == pb.TASK_STATE_COMPLETED
            assert text_of(done) == "You said: hold"


async def test_two_servers_on_one_postgres_answer_for_one_context(
    anyio_backend: Any, postgres_url: str
) -> None:
    backend, ports = _backend(anyio_backend), [_free_port(), _free_port()]
    with servers(postgres_url, ports, backend):
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        async with client_of(urls[0]) as one, client_of(urls[1]) as two:
            first = await send(one, said("from one", "p1"))
            context = first.context_id
            seen = await two.get_task(pb.GetTaskRequest(id=first.id))  # the other replica answers
            assert text_of(seen) == "You said: from one"
            replies: dict[str, str] = {}

            async def talk(client: Any, n: int) -> None:
                task = await send(client, said(f"message {n}", f"p-{n}", context_id=context))
                replies[task.id] = text_of(task)
                assert replies[task.id] == f"You said: message {n}"

            async with anyio.create_task_group() as group:
                for n in range(10):
                    group.start_soon(talk, (one, two)[n % 2], n)
            for task_id, text in replies.items():
                for client in (one, two):
                    assert text_of(await client.get_task(pb.GetTaskRequest(id=task_id))) == text
