"""What the loopback `ChatServer` refuses, as the real APIs do: a 400 before any canned reply.

OpenAI's chat completions refuse JSON mode (``response_format`` of type
``json_object``) when no message says "json", and a ``json_schema``
response format without a valid name and schema (with ``strict``, a schema
whose objects do not list every property in ``required`` and set
``additionalProperties`` to false). Anthropic's Messages refuse a
``tool_choice`` that forces a tool (``tool`` or ``any``) no ``tools`` entry
defines. A refused request takes no canned response from the queue.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["refusal"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _strict_problem(schema: Any, where: str = "schema") -> str:
    """What OpenAI's strict mode finds wrong with ``schema`` ("" if nothing)."""
    if isinstance(schema, list):
        return next((p for item in schema if (p := _strict_problem(item, where))), "")
    if not isinstance(schema, dict):
        return ""
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return f"In context={where!r}, 'additionalProperties' is required to be false"
        missing = sorted(set(properties) - set(schema.get("required", ())))
        if missing:
            return f"In context={where!r}, 'required' is missing {missing}"
    for key in ("properties", "$defs"):
        for name, value in dict(schema.get(key) or {}).items():
            if problem := _strict_problem(value, f"{where}.{name}"):
                return problem
    return "".join(_strict_problem(schema[k], where) for k in ("items", "anyOf") if k in schema)


def _openai(body: dict[str, Any]) -> str:
    answer = body.get("response_format")
    if answer is None:
        return ""
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind == "json_object":
        said = " ".join(str(m.get("content") or "") for m in body.get("messages", ()))
        if "json" not in said.lower():
            return (
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'."
            )
        return ""
    if kind == "text":
        return ""
    if kind != "json_schema":
        return f"Invalid value for 'response_format.type': {kind!r}"
    spec = answer.get("json_schema")
    if not isinstance(spec, dict) or not _NAME.match(str(spec.get("name", ""))):
        return "Invalid 'response_format.json_schema.name': a name of [A-Za-z0-9_-]{1,64}"
    schema = spec.get("schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "Invalid schema for response_format: the root must be an object"
    if spec.get("strict") is True:
        return _strict_problem(schema)
    return ""


def _anthropic(body: dict[str, Any]) -> str:
    choice = body.get("tool_choice")
    if choice is None:
        return ""
    names = {tool.get("name") for tool in body.get("tools") or ()}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("any", "tool") and not names:
        return "tool_choice: a tool must be chosen from tools, and none are defined"
    if kind == "tool" and choice.get("name") not in names:
        return f"tool_choice.name: Tool {choice.get('name')!r} not found in provided tools"
    return ""


def refusal(path: str, data: bytes) -> tuple[int, Any] | None:
    """The ``(status, body)`` the real API answers this request with, if it refuses it."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if path.endswith("/chat/completions") and (problem := _openai(body)):
        error = {"message": problem, "type": "invalid_request_error", "param": "response_format"}
        return 400, {"error": error}
    if path.endswith("/v1/messages") and (problem := _anthropic(body)):
        error = {"type": "invalid_request_error", "message": problem}
        return 400, {"type": "error", "error": error}
    return None
