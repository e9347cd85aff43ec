"""What an MCP server's tools look like to the model, and their results as a `ToolMessage`'s text.

A server's tool becomes a `ToolSpec` (its name made one that model APIs
accept, its description, its ``inputSchema``; the arguments the model sends
are checked against that schema before the call, by ``._mcp_schema``); a
``CallToolResult`` becomes text (`result_text`): its structured content as
JSON, else its text blocks, with images, audio and resources described. The
credentials given for a server (headers, environment variables, a password
in its URL) are registered for scrubbing (`register_credentials`).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from .._redact import REDACTED, is_secret_key, register_secret
from ..protocols import ToolSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPTool

__all__ = [
    "model_name",
    "register_credentials",
    "result_text",
    "shown_url",
    "spec_of",
]

_UNFIT = re.compile(r"[^A-Za-z0-9_-]")
_SCHEMES = ("bearer ", "basic ", "token ")


def model_name(prefix: str, name: str) -> str:
    """The name the model calls a server's tool by: ``prefix + name``, fit for model APIs."""
    return _UNFIT.sub("_", f"{prefix}{name}")[:64]


def spec_of(tool: MCPTool, name: str) -> ToolSpec:
    """A server's tool as the model sees it, under ``name``."""
    parameters = dict(tool.input_schema or {})
    parameters.pop("title", None)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    description = tool.description or tool.title or ""
    return ToolSpec(name=name, description=description, parameters=parameters)


def result_text(result: CallToolResult) -> str:
    """The text the model gets for a tool's result.

    Its structured content as JSON when it has some (the text blocks are then
    left out: they repeat it), else its text blocks; images, audio and
    resources described in a line each.
    """
    structured = result.structured_content
    parts = [] if structured is None else [to_json(structured).decode()]
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            if structured is None:
                parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            size = len(str(getattr(block, "data", ""))) * 3 // 4
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '')}, about {size} bytes]")
        elif kind == "resource_link":
            parts.append(
                f"[resource link: {getattr(block, 'name', '')} {getattr(block, 'uri', '')}]"
            )
        elif kind == "resource":
            parts.append(_resource(getattr(block, "resource", None)))
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    return "\n".join(parts) if parts else "(no content)"


def _resource(resource: Any) -> str:
    uri = getattr(resource, "uri", "")
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return f"[resource {uri}]\n{text}"
    size = len(str(getattr(resource, "blob", ""))) * 3 // 4
    return (
        f"[resource {uri}: {getattr(resource, 'mime_type', None) or 'binary'}, about {size} bytes]"
    )


def register_credentials(values: Mapping[str, str]) -> None:
    """Register the values of ``values`` (headers, environment variables) named like a credential.

    ``Authorization: Bearer abc...`` registers the whole value and ``abc...``.
    """
    for name, value in values.items():
        if not is_secret_key(name) or not value:
            continue
        register_secret(value)
        register_secret(value.strip())
        lowered = value.lower()
        for scheme in _SCHEMES:
            if lowered.startswith(scheme):
                register_secret(value[len(scheme) :].strip())


def shown_url(url: str) -> str:
    """``url`` as it may be shown: a password, and query values named like a credential, masked.

    What is masked is registered as a secret too.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.query:
        shown = []
        for item in parts.query.split("&"):
            name, equals, value = item.partition("=")
            if equals and value and is_secret_key(urllib.parse.unquote_plus(name)):
                register_secret(value)
                register_secret(urllib.parse.unquote_plus(value))
                item = f"{name}={REDACTED}"
            shown.append(item)
        parts = parts._replace(query="&".join(shown))
    userinfo, at, host = parts.netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        secret = password if colon else user
        register_secret(secret)
        register_secret(urllib.parse.unquote(secret))
        parts = parts._replace(
            netloc=f"{user}:{REDACTED}@{host}" if colon else f"{REDACTED}@{host}"
        )
    return urllib.parse.urlunsplit(parts)
