"""A2A serving: many A2A clients at once against one ``arkhon-rheo serve`` process.

One server process (``arkhon-rheo serve bench.serve:agent``) on a SQLite
file; C concurrent clients (the a2a-sdk's own client, over real HTTP on
loopback), each sending M messages one after the other in its own context
(a conversation: the first message opens it); before them, one client
alone (``--alone`` messages), for the latency of a server with nothing else
to do. The agent is a conversational
ReAct agent whose model answers at once (``You said: ...``).

For each message, the **added latency** is the time from the client's call
to its return less the turn's own time (from the start of the step that
applied the message to the commit that ended the turn, as the session's
events record them): the HTTP round trip, JSON-RPC and protobuf, storing
the message, waking the session, and learning of the reply. Reported: the
errors (every reply is checked against its message), p50 and p99 of the
added latency, and the messages per second; then the same conversations
asked in process (`AgentSystem.ask`, no HTTP), the baseline: the difference
is what A2A over HTTP adds. Run it from the repository root::

    python bench/serve.py [--quick] [--clients 200] [--messages 5] [--alone 50] [--backend trio]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from arkhon_rheo import AgentSystem
from arkhon_rheo.protocols import AssistantMessage, Message, ModelReply, ToolSpec, UserMessage
from arkhon_rheo.react import Conversation, UserInput, react_agent

if TYPE_CHECKING:
    from collections.abc import Sequence

ROOT = Path(__file__).resolve().parents[1]


class Repeat:
    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        last = [m.content for m in messages if isinstance(m, UserMessage)][-1]
        return ModelReply(message=AssistantMessage(content=f"You said: {last}"))


#: ``bench.serve:agent`` for the server process.
agent = react_agent(Repeat(), conversational=True, name="bench-serve")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[
        min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))
    ]


def _server(store: str, port: int, backend: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "arkhon_rheo", "serve", "bench.serve:agent", "--store", store,
               "--port", str(port), "--backend", backend]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if "A2A on" not in line:
        raise SystemExit(f"the server did not start: {line!r}")
    return process


async def _clients(url: str, clients: int, messages: int) -> tuple[list[Any], list[str]]:
    """Every client's messages, timed: (context, message id, called, returned); the errors."""
    timed: list[Any] = []
    errors: list[str] = []
    async with httpx.AsyncClient(timeout=120) as http:
        card = await A2ACardResolver(http, url).get_agent_card()

    plain = ssl.create_default_context()  # plain HTTP: one context for all, never loaded again

    async def talk(n: int) -> None:
        # A client of its own, with its own connection (one shared pool of 200
        # connections costs httpx more CPU than the server spends).
        async with httpx.AsyncClient(timeout=120, verify=plain) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            context = ""
            for m in range(messages):
                text = f"client {n} message {m}"
                message = pb.Message(message_id=f"c{n}-m{m}", context_id=context, role=pb.ROLE_USER)
                message.parts.append(pb.Part(text=text))
                called = time.time()
                try:
                    (event,) = [
                        e async for e in client.send_message(pb.SendMessageRequest(message=message))
                    ]
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                returned = time.time()
                task = event.task
                answer = "".join(
                    part.text for artifact in task.artifacts for part in artifact.parts
                )
                if task.status.state != pb.TASK_STATE_COMPLETED or answer != f"You said: {text}":
                    errors.append(
                        f"client {n} message {m}: {pb.TaskState.Name(task.status.state)} {answer!r}"
                    )
                    return
                context = task.context_id
                timed.append((context, message.message_id, called, returned))

    async with anyio.create_task_group() as group:
        for n in range(clients):
            group.start_soon(talk, n)
    return timed, errors


async def _turns(store: str, timed: list[Any]) -> list[float]:
    """Each message's added latency: its call's time less its turn's own."""
    added = []
    async with AgentSystem(path=store) as system:
        logs: dict[str, Any] = {}
        for context, message_id, called, returned in timed:
            if context not in logs:
                logs[context] = await system.stored(agent, context).history()
            events = logs[context]
            applying = next(
                e for e in events if e.info and e.info.get("message", {}).get("id") == message_id
            )
            end = next(e for e in events if e.seq > applying.seq and agent.waits_in(e.to_state))
            added.append(returned - called - (end.finished_at - applying.started_at))
    return added


async def _direct(store: str, clients: int, messages: int) -> tuple[list[Any], float]:
    """The same conversations asked in process (`AgentSystem.ask`, no HTTP): the baseline."""
    timed: list[Any] = []
    async with AgentSystem(path=store) as system:

        async def talk(n: int) -> None:
            context = f"direct-{n}"
            await Conversation.open(system, agent, context)
            for m in range(messages):
                called = time.time()
                reply = await system.ask(
                    agent, context, UserInput(text=f"client {n} message {m}"), message_id=f"d{m}"
                )
                assert reply.value == f"You said: client {n} message {m}"
                timed.append((context, f"d{m}", called, time.time()))

        started = time.monotonic()
        async with anyio.create_task_group() as group:
            for n in range(clients):
                group.start_soon(talk, n)
        return timed, time.monotonic() - started


def _print(
    label: str, errors: list[str] | None, total: int, added: list[float], wall: float
) -> None:
    if errors is not None:
        print(f"  {label:<36} errors: {len(errors)} of {total}")
        for error in errors[:5]:
            print(f"    {error}")
    else:
        print(f"  {label}")
    if added:
        p50, p99 = _quantiles(added)
        print(
            f"  {'':<36} added latency p50 {p50 * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms,"
            f" {len(added) / wall:.0f} messages/s"
        )


async def run(args: argparse.Namespace) -> None:
    rows = [(1, args.alone), (args.clients, args.messages)]  # one client alone, then all at once
    with tempfile.TemporaryDirectory() as folder:
        store, port = str(Path(folder) / "serve.db"), _free_port()
        server = _server(store, port, args.backend)
        outcomes = []
        try:
            for clients, messages in rows:
                started = time.monotonic()
                timed, errors = await _clients(f"http://127.0.0.1:{port}", clients, messages)
                outcomes.append((clients, messages, timed, errors, time.monotonic() - started))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        print(f"one server ({args.backend}, SQLite), the a2a-sdk's client, SendMessage:")
        for clients, messages, timed, errors, wall in outcomes:
            added = await _turns(store, timed)
            label = f"{clients} client{'s' if clients > 1 else ''} x {messages} messages"
            _print(label, errors, clients * messages, added, wall)
        print("the same, asked in process (AgentSystem.ask on SQLite, no HTTP): the baseline")
        for clients, messages in rows:
            direct = str(Path(folder) / f"direct-{clients}.db")
            timed, wall = await _direct(direct, clients, messages)
            label = f"{clients} conversation{'s' if clients > 1 else ''} x {messages} asks"
            _print(label, None, clients * messages, await _turns(direct, timed), wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--alone", type=int, default=50, help="messages of the lone client first")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--quick", action="store_true", help="20 clients x 3, 10 alone")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.messages, args.alone = 20, 3, 10
    print(f"python {platform.python_version()}, {os.cpu_count()} cores")
    anyio.run(run, args, backend=args.backend)


if __name__ == "__main__":
    main()
