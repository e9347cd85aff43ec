"""A small MCP server for the tests, on the SDK's own server framework (`MCPServer`).

Run ``python -m tests.support.mcp_server stdio`` to serve over stdio, or
``python -m tests.support.mcp_server http [PORT]`` to serve streamable HTTP on
``127.0.0.1:PORT`` at ``/mcp`` (a free port by default; it prints the port).

Its tools: ``add`` (two ints), ``fail`` (always reports an error), ``stats``
(structured output), ``pixel`` (an image), ``whoami`` (its process id, so a
test can kill it), ``header`` (a request header, echoed back: HTTP only) and
``hang`` (never answers), ``send_email`` (a side effect: it keeps what it
sent) and ``sent`` (how many emails went to an address).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

#: A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

server = MCPServer("arkhon-test-server", log_level="CRITICAL")


class Stats(BaseModel):
    """Summary statistics of some numbers."""

    count: int
    total: float
    mean: float


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Always fails, with the message given."""
    raise ToolError(message)


@server.tool()
def stats(numbers: list[float]) -> Stats:
    """Count, total and mean of a list of numbers."""
    total = sum(numbers)
    return Stats(count=len(numbers), total=total, mean=total / len(numbers) if numbers else 0.0)


@server.tool()
def pixel() -> Image:
    """A one-pixel PNG image."""
    return Image(data=PNG, format="png")


@server.tool()
def whoami() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of one header of the HTTP request that called this tool."""
    headers = ctx.headers or {}
    return headers.get(name.lower(), "(none)")


@server.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "unreachable"


#: The emails ``send_email`` sent, by recipient (for this server process's life).
OUTBOX: dict[str, int] = {}


@server.tool()
def send_email(to: str, subject: str) -> str:
    """Send an email."""
    OUTBOX[to] = OUTBOX.get(to, 0) + 1
    return f"sent {subject!r} to {to}"


@server.tool()
def sent(to: str) -> int:
    """How many emails were sent to an address."""
    return OUTBOX.get(to, 0)


def serve_http(port: int) -> None:
    """Serve streamable HTTP on ``port`` (0: a free one), printing the port once it listens.

    The socket listens before the port is printed, so a client that read it
    may connect at once (the connection waits in the backlog until uvicorn
    accepts it).
    """
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="critical")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


def main() -> None:
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "stdio":
        server.run("stdio")
    else:
        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)


if __name__ == "__main__":
    main()
