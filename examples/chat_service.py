"""A chat service: many people talking to their agents at once, over HTTP.

A FastAPI app with one `AgentSystem` in its lifespan and one conversational
agent; each thread is a durable session (a `Conversation`), got or created
by its id. Every request asks the thread (`Conversation.say` is
`AgentSystem.ask`), so any number of requests may talk to one thread at once,
in any number of service processes, with or without `arkhon-rheo worker`
processes: each message is stored, applied once, in the order the inbox took
it, and each request gets the reply to its own message.

Serve it with ``uvicorn examples.chat_service:app`` (or hypercorn). The store
is ``ARKHON_RHEO_STORE`` (a SQLite file path or a ``postgresql://`` URL;
``./arkhon-rheo.db`` by default). With ``OPENAI_BASE_URL`` set (and
``OPENAI_API_KEY``, ``ARKHON_MODEL`` as your server needs) the agent talks to
that OpenAI-compatible server; without it, to a scripted model that repeats
the user's words (``You said: ...``), so each reply can be matched to its
message.

- ``POST /threads/{thread_id}/messages`` ``{"text": "..."}``: creates the
  thread if it is new, returns ``{"reply": "...", "message_id": "..."}``. An
  ``Idempotency-Key`` header is the message's id: a retried request returns
  the same reply and applies nothing twice.
- ``GET /threads/{thread_id}``: ``{"messages": [{"role": "user"|"assistant",
  "text": "..."}, ...]}`` in order (404 for a thread that does not exist).
- ``POST /threads/{thread_id}/stream`` ``{"text": "..."}``: the reply as
  server-sent events (``data:`` lines of JSON ``{"delta": "..."}``, then an
  ``event: done`` with the whole reply).

``python examples/chat_service.py [asyncio|trio]`` serves it on a free local
port for a moment, talks to it (three threads at once) and prints what it got.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from arkhon_rheo import AgentSystem
from arkhon_rheo.errors import MessageRefused, NoReply, SessionError, SessionNotFound
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelClient,
    ModelReply,
    ReplyDelta,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import Calls, Conversation, react_agent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence


class Repeater:
    """A model that repeats the user's last message (streamed word by word): offline replies."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        last = [m.content for m in messages if isinstance(m, UserMessage)][-1]
        return ModelReply(message=AssistantMessage(content=f"You said: {last}"))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        reply = await self.complete(messages, tools=tools, json_mode=json_mode)
        for index, word in enumerate((reply.message.content or "").split(" ")):
            yield ReplyDelta(text=word if index == 0 else f" {word}", index=index)
        yield reply


def _model() -> ModelClient:
    if os.environ.get("OPENAI_BASE_URL"):
        return OpenAIChatClient()  # opened by each system that serves the agent
    return Repeater()


#: The agent: ``examples.chat_service:agent`` for ``arkhon-rheo worker`` and ``ask``.
agent = react_agent(
    _model(),
    conversational=True,
    name="chat",
    calls=Calls(stream=True),
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    store = os.environ.get("ARKHON_RHEO_STORE", "./arkhon-rheo.db")
    async with AgentSystem(store=store, machines=[agent]) as system:
        await system.recover(agent)  # the threads a crashed process was driving go on here
        app.state.system = system
        yield


app = FastAPI(title="arkhon-rheo chat", lifespan=lifespan)


class Said(BaseModel):
    text: str = Field(min_length=1, max_length=100_000)


async def _thread(request: Request, thread_id: str) -> Conversation:
    return await Conversation.open(request.app.state.system, agent, thread_id)


def _message_id(request: Request) -> str:
    return request.headers.get("idempotency-key") or uuid.uuid4().hex


@app.post("/threads/{thread_id}/messages")
async def post_message(thread_id: str, said: Said, request: Request) -> dict[str, str]:
    chat = await _thread(request, thread_id)
    message_id = _message_id(request)
    try:
        reply = await chat.say(said.text, message_id=message_id, timeout=60)
    except NoReply as exc:
        raise HTTPException(504, str(exc)) from None
    except MessageRefused as exc:
        raise HTTPException(409, str(exc)) from None
    except SessionError as exc:
        raise HTTPException(500, str(exc)) from None
    return {"reply": reply, "message_id": message_id}


@app.get("/threads/{thread_id}")
async def get_thread(thread_id: str, request: Request) -> dict[str, list[dict[str, str]]]:
    chat = Conversation(request.app.state.system, agent, session_id=thread_id)
    try:
        said = await chat.transcript()
    except SessionNotFound:
        raise HTTPException(404, f"no thread {thread_id!r}") from None
    return {"messages": [{"role": each.role, "text": each.text} for each in said]}


@app.post("/threads/{thread_id}/stream")
async def stream_message(thread_id: str, said: Said, request: Request) -> StreamingResponse:
    chat = await _thread(request, thread_id)
    message_id = _message_id(request)

    async def events() -> AsyncIterator[str]:
        whole = []
        async for delta in chat.stream(said.text, message_id=message_id, timeout=60):
            whole.append(delta)
            yield f"data: {json.dumps({'delta': delta})}\n\n"
        done = {"reply": "".join(whole), "message_id": message_id}
        yield f"event: done\ndata: {json.dumps(done)}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


# -- a look at it, served on a free port for a moment -----------------------------


async def _serve(backend: str, port: int, stop: anyio.Event) -> None:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = config.errorlog = None
    if backend == "trio":
        from hypercorn.trio import serve as serve_trio

        await serve_trio(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
    else:
        from hypercorn.asyncio import serve as serve_asyncio

        await serve_asyncio(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]


async def _talk(port: int) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for _ in range(200):  # the server is starting
            try:
                await client.get("/threads/none")
                break
            except httpx.TransportError:
                await anyio.sleep(0.05)
        replies: dict[str, Any] = {}

        async def talk(thread: str, text: str) -> None:
            response = await client.post(f"/threads/{thread}/messages", json={"text": text})
            replies[f"{thread}: {text}"] = response.json()["reply"]

        async with anyio.create_task_group() as group:
            for thread in ("ada", "bob", "cy"):
                for text in ("hello", "how are you?"):
                    group.start_soon(talk, thread, text)
        for asked in sorted(replies):
            print(f"{asked} -> {replies[asked]}")
        async with client.stream("POST", "/threads/ada/stream", json={"text": "stream it"}) as sse:
            deltas = [
                json.loads(line[6:])["delta"]
                async for line in sse.aiter_lines()
                if line.startswith("data: ") and "delta" in line
            ]
        print(f"streamed to ada in {len(deltas)} pieces: {''.join(deltas)!r}")
        thread = (await client.get("/threads/ada")).json()["messages"]
        print(f"ada's thread: {len(thread)} messages, the last: {thread[-1]}")


async def main(backend: str) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(_serve, backend, port, stop)
        try:
            await _talk(port)
        finally:
            stop.set()


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    with tempfile.TemporaryDirectory() as folder:
        os.environ.setdefault("ARKHON_RHEO_STORE", str(Path(folder) / "chat.db"))
        anyio.run(main, chosen, backend=chosen)
