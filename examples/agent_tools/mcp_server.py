"""A tiny MCP server for ``examples/mcp_agent.py``, on the MCP SDK's own server framework.

Run over stdio by the example (``python examples/agent_tools/mcp_server.py``);
any MCP client can use it the same way. Two tools: a city's population, from
a small table, and a comparison of two numbers with structured output.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("cities", log_level="ERROR")

POPULATION = {"paris": 2_102_650, "berlin": 3_878_100, "madrid": 3_460_491, "rome": 2_754_719}


class Comparison(BaseModel):
    """Which of two numbers is larger, and by what factor."""

    larger: str
    factor: float


@server.tool()
def population(city: str) -> int:
    """The number of people living in a city (Paris, Berlin, Madrid or Rome)."""
    try:
        return POPULATION[city.lower()]
    except KeyError:
        raise ToolError(f"no data for {city!r}; try one of {', '.join(POPULATION)}") from None


@server.tool()
def compare(a: float, b: float) -> Comparison:
    """Compare two positive numbers: which is larger ("a" or "b") and by what factor."""
    larger, smaller = (a, b) if a >= b else (b, a)
    return Comparison(larger="a" if a >= b else "b", factor=round(larger / smaller, 3))


if __name__ == "__main__":
    server.run("stdio")
