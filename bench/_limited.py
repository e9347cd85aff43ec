"""A loopback chat-completions server that allows ``limit`` requests per ``window`` seconds.

Past the limit it answers 429 with a ``Retry-After`` (whole seconds, until
the oldest accepted request leaves the sliding window), as hosted APIs do.
Every request's arrival time is kept, so the bench can say how many were sent
in any window. A module of the ``bench`` scripts; not part of the library.
"""

from __future__ import annotations

import json
import math
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from anyio.abc import SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from anyio.abc import SocketStream

_REPLY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "done"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 1},
    }
).encode()
_LIMITED = json.dumps({"error": {"message": "rate limit reached: slow down"}}).encode()


class LimitedServer:
    """The server's limit, its sliding window of accepted requests, and what it saw."""

    def __init__(self, port: int, limit: int, window: float) -> None:
        self.url = f"http://127.0.0.1:{port}/v1"
        self.limit = limit
        self.window = window
        self.accepted: deque[float] = deque()
        #: The arrival time of every request, in order.
        self.arrivals: list[float] = []
        self.rejected = 0

    def decide(self, now: float) -> float | None:
        """None to answer, or the seconds a refused request is told to wait."""
        accepted = self.accepted
        while accepted and accepted[0] <= now - self.window:
            accepted.popleft()
        if len(accepted) < self.limit:
            accepted.append(now)
            return None
        self.rejected += 1
        return accepted[0] + self.window - now

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            while True:
                try:
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    if length:
                        await reader.receive_exactly(length)
                    now = anyio.current_time()
                    self.arrivals.append(now)
                    wait = self.decide(now)
                    if wait is None:
                        status, body, extra = b"200 OK", _REPLY, b""
                    else:
                        after = max(1, math.ceil(wait))
                        status, body = b"429 Too Many Requests", _LIMITED
                        extra = b"retry-after: %d\r\n" % after
                    await stream.send(
                        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\n%scontent-length: %d"
                        b"\r\n\r\n%s" % (status, extra, len(body), body)
                    )
                except (
                    anyio.IncompleteRead,
                    anyio.EndOfStream,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                ):
                    return


def peak_in_window(times: Sequence[float], window: float) -> int:
    """The most of ``times`` (sorted) that fall within any ``window`` seconds."""
    best = start = 0
    for end, at in enumerate(times):
        while at - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


@asynccontextmanager
async def open_limited_server(limit: int, window: float) -> AsyncIterator[LimitedServer]:
    """Serve on 127.0.0.1, a free port, until the block is left."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = LimitedServer(listener.extra(SocketAttribute.local_port), limit, window)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            group.cancel_scope.cancel()
