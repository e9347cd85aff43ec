"""A misbehaving MCP server for the tests, over stdio, on the SDK's low-level `Server`.

Run ``python -m tests.support.mcp_odd_server '<json>'``, the JSON an object:

- ``"tools"``: the tools it lists, each ``{"name": ..., "inputSchema": ...}``,
  as given (an empty name, a schema with any ``$ref``: nothing is checked;
  ``"type": "object"`` is added to a schema without a type);
- ``"spawn"`` (optional): a file to write the process id of a child it starts
  in a session of its own (``setsid sleep``), before it serves.

A call of ``hang`` never answers; a call of any other tool answers ``"ok"``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def main() -> None:
    """Serve the tools described by the JSON in ``sys.argv[1]`` over stdio."""
    config: dict[str, Any] = json.loads(sys.argv[1])
    tools = [  # the SDK's server lists no schema without a "type"
        types.Tool(name=one["name"], input_schema={"type": "object", **one.get("inputSchema", {})})
        for one in config.get("tools", [])
    ]
    spawn = config.get("spawn")
    if spawn:
        child = subprocess.Popen(
            ["sleep", "300"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(spawn, "w") as file:
            file.write(str(child.pid))

    async def list_tools(context: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(context: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "hang":
            await anyio.sleep_forever()
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    server: Server[Any] = Server(
        "arkhon-odd-server", on_list_tools=list_tools, on_call_tool=call_tool
    )

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
