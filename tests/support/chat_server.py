"""A real loopback HTTP/1.1 server for model-client tests, serving canned responses.

::

    async with open_chat_server() as server:
        server.add(Canned.completion(content="hi"))
        async with OpenAIChatClient(base_url=server.url, api_key="k") as client:
            reply = await client.complete([UserMessage(content="hello")])
        assert server.requests[0].json["model"] == ...

Responses are served in the order they were queued, one per request, on any
connection; each request received is recorded. A `Canned` response may hold
until an event is set (a slow server), stream server-sent events chunk by
chunk, drop the connection part-way through its body, or build its body from
the request it answers (``render``: a server that echoes what it was sent, the
key included). A request the real API would refuse (`tests.support.api_checks`:
JSON mode without "json" in the messages, a malformed ``json_schema``, a
forced tool no tool defines) is answered 400 as that API answers it, and
takes no canned response. Nothing here sleeps.
"""

from __future__ import annotations

import json
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.support.api_checks import refusal

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from anyio.abc import SocketStream

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    413: "Payload Too Large",
    429: "Too Many Requests",
    529: "Overloaded",
}


@dataclass
class Canned:
    """One canned HTTP response.

    Attributes:
        status: The status code.
        body: The body (a dict or list is sent as JSON).
        headers: Extra headers (``Retry-After``...).
        events: Server-sent events, each sent as one chunk of a chunked body,
            then ``data: [DONE]``: a dict, list or str as one ``data:`` line; a
            ``(name, data)`` pair with an ``event: name`` line before it; bytes
            as they are (several ``data:`` lines, ``retry:`` fields, half an
            event...).
        hold: Wait for this event before sending anything (a slow server).
        drop_after: Send only this many bytes of the body, then close the connection.
        done_marker: Send ``data: [DONE]`` after ``events``.
        render: Build the body from the request answered (replaces ``body``).
    """

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    events: Sequence[Any] | None = None
    hold: anyio.Event | None = None
    drop_after: int | None = None
    done_marker: bool = True
    render: Callable[[Received], Any] | None = None

    @classmethod
    def completion(
        cls,
        content: str | None = None,
        *,
        tool_calls: Sequence[tuple[str, str, str]] = (),
        finish_reason: str | None = None,
        usage: tuple[int, int] = (3, 5),
        model: str = "test-model",
    ) -> Canned:
        """A chat-completions reply: text and/or ``(id, name, arguments)`` tool calls."""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in tool_calls
            ]
        reason = finish_reason or ("tool_calls" if tool_calls else "stop")
        return cls(
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
            }
        )

    @classmethod
    def error(cls, status: int, message: str, **headers: str) -> Canned:
        """An error in OpenAI's shape: ``{"error": {"message": ...}}``."""
        return cls(status=status, body={"error": {"message": message}}, headers=headers)

    def body_bytes(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


def text_chunks(*pieces: str, model: str = "test-model") -> list[dict[str, Any]]:
    """Streamed chunks carrying ``pieces`` of text, then a stop chunk."""
    chunks: list[dict[str, Any]] = [
        {"model": model, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
        for p in pieces
    ]
    chunks.append({"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return chunks


def sse_bytes(event: Any) -> bytes:
    """One server-sent event as sent (see `Canned.events`)."""
    if isinstance(event, bytes):
        return event
    name = ""
    if isinstance(event, tuple):
        name, event = event
    data = event if isinstance(event, str) else json.dumps(event)
    return (f"event: {name}\n" if name else "").encode() + f"data: {data}\n\n".encode()


@dataclass
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class ChatServer:
    """The server's state: its address, the queue of responses, the requests received."""

    def __init__(self, port: int) -> None:
        #: The server's root (Anthropic's base URL); ``url`` is OpenAI's API root under it.
        self.root = f"http://127.0.0.1:{port}"
        self.url = f"{self.root}/v1"
        self.queue: deque[Canned] = deque()
        self.requests: list[Received] = []
        self.connections = 0
        #: Refuse what the real APIs refuse (`tests.support.api_checks`) with a 400.
        self.checks = True

    def add(self, *responses: Canned) -> None:
        """Queue responses, served one per request in this order."""
        self.queue.extend(responses)

    async def handle(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            while True:
                try:
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.receive_exactly(length) if length else b""
                self.requests.append(Received(method, path, headers, body))
                refused = refusal(path, body) if self.checks else None
                if refused is not None:  # as the real API would: no canned response taken
                    canned = Canned(status=refused[0], body=refused[1])
                elif self.queue:
                    canned = self.queue.popleft()
                else:
                    canned = Canned.error(500, "no canned response left")
                if canned.render is not None:
                    canned.body = canned.render(self.requests[-1])
                try:
                    keep = await self._respond(stream, canned)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                if not keep:
                    return

    async def _respond(self, stream: SocketStream, canned: Canned) -> bool:
        if canned.hold is not None:
            await canned.hold.wait()
        reason = _REASONS.get(canned.status, "Status")
        head = [f"HTTP/1.1 {canned.status} {reason}"]
        extra = {k.lower(): v for k, v in canned.headers.items()}
        if canned.events is not None:
            head += ["content-type: text/event-stream", "transfer-encoding: chunked"]
            head += [f"{k}: {v}" for k, v in extra.items()]
            await stream.send(("\r\n".join(head) + "\r\n\r\n").encode())
            events = [sse_bytes(event) for event in canned.events]
            if canned.done_marker:
                events.append(sse_bytes("[DONE]"))
            for data in events:
                await stream.send(b"%x\r\n%s\r\n" % (len(data), data))
            if canned.drop_after is not None:
                return False  # no final chunk: the stream is cut
            await stream.send(b"0\r\n\r\n")
            return True
        body = canned.body_bytes()
        extra.setdefault("content-type", "application/json")
        head += [f"content-length: {len(body)}", *(f"{k}: {v}" for k, v in extra.items())]
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode())
        if canned.drop_after is not None:
            await stream.send(body[: canned.drop_after])
            return False
        await stream.send(body)
        return True


@asynccontextmanager
async def open_chat_server() -> AsyncIterator[ChatServer]:
    """Serve on 127.0.0.1, a free port, until the block is left."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = ChatServer(listener.extra(SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            group.cancel_scope.cancel()
