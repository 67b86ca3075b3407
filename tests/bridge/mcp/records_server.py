"""A real MCP server (the ``mcp`` package's ``MCPServer``, FastMCP in mcp 1.x, over stdio) with one destructive tool.

Started by ``tests/bridge/test_bridge_mcp.py`` as a subprocess through ADK's ``McpToolset``. Every call
that reaches the tool is appended, as JSON, to the file named by ``SIGNOFF_MCP_CALLS``: what the server
really received, recorded from inside the server.
"""

from __future__ import annotations

import json
import os

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x, as google-adk's extra allows (mcp>=1.24,<3)
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]

server = Server("records")


@server.tool()
def delete_records(table: str, where: str) -> str:
    """Delete the rows of ``table`` that match ``where``. Destructive."""
    with open(os.environ["SIGNOFF_MCP_CALLS"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"tool": "delete_records", "args": {"table": table, "where": where}}) + "\n")
    return f"deleted from {table} where {where}"


if __name__ == "__main__":
    server.run("stdio")
