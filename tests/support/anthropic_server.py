"""Canned replies in Anthropic's Messages format, served by the loopback `ChatServer`.

::

    async with open_chat_server() as server:
        server.add(message("hi", usage=(7, 2)))
        async with AnthropicClient("claude-test", api_key="k", base_url=server.root) as client:
            reply = await client.complete([UserMessage(content="hello")])
        assert server.requests[0].path == "/v1/messages"

The server is `tests.support.chat_server`'s (a real HTTP/1.1 server on
127.0.0.1, nothing mocked); this module builds what Anthropic's API sends: a
message body, an error body (``{"type": "error", "error": {...}}``), and a
stream of named events (``event: message_start`` ... ``event: message_stop``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.support.chat_server import Canned

if TYPE_CHECKING:
    from collections.abc import Sequence

MODEL = "claude-test"

#: Anthropic's error type for each status it answers with.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def usage_of(usage: Sequence[int]) -> dict[str, int]:
    """``(input, output[, cache_creation, cache_read])`` as Anthropic's usage object."""
    data = {"input_tokens": usage[0], "output_tokens": usage[1]}
    if len(usage) > 2:
        data["cache_creation_input_tokens"] = usage[2]
        data["cache_read_input_tokens"] = usage[3]
    return data


def message_body(
    text: str | None = None,
    *,
    tool_uses: Sequence[tuple[str, str, dict[str, Any]]] = (),
    stop_reason: str | None = None,
    usage: Sequence[int] = (3, 5),
    model: str = MODEL,
) -> dict[str, Any]:
    """A Messages reply: a text block and/or ``(id, name, input)`` tool_use blocks."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in tool_uses]
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"),
        "stop_sequence": None,
        "usage": usage_of(usage),
    }


def message(
    text: str | None = None,
    *,
    tool_uses: Sequence[tuple[str, str, dict[str, Any]]] = (),
    stop_reason: str | None = None,
    usage: Sequence[int] = (3, 5),
    model: str = MODEL,
) -> Canned:
    """A canned Messages reply (see `message_body`)."""
    return Canned(
        body=message_body(
            text, tool_uses=tool_uses, stop_reason=stop_reason, usage=usage, model=model
        )
    )


def error(status: int, text: str, **headers: str) -> Canned:
    """An error in Anthropic's shape, its type the one Anthropic gives ``status``."""
    kind = ERROR_TYPES.get(status, "api_error")
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return Canned(status=status, body=body, headers=headers)


def named(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """An event named by its data's type, as Anthropic sends each."""
    return (data["type"], data)


def block_events(index: int, block: dict[str, Any], deltas: Sequence[dict[str, Any]]) -> list[Any]:
    """The events of one content block: its start, its deltas, its stop."""
    return [
        named({"type": "content_block_start", "index": index, "content_block": block}),
        *(named({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas),
        named({"type": "content_block_stop", "index": index}),
    ]


def stream_events(
    *texts: str,
    tool_uses: Sequence[tuple[str, str, Sequence[str]]] = (),
    stop_reason: str | None = None,
    usage: Sequence[int] = (3, 5),
    model: str = MODEL,
    stop: bool = True,
) -> list[Any]:
    """A streamed reply: one text block in ``texts`` pieces, then ``(id, name, json pieces)``.

    The usage's input side comes in ``message_start``, its output in
    ``message_delta``; a ``ping`` comes after the start; ``stop=False``
    leaves out ``message_stop`` (a stream cut short).
    """
    start: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "usage": {**usage_of(usage), "output_tokens": 1},
    }
    events: list[Any] = [
        named({"type": "message_start", "message": start}),
        named({"type": "ping"}),
    ]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if texts:
        deltas = [{"type": "text_delta", "text": piece} for piece in texts]
        blocks.append(({"type": "text", "text": ""}, deltas))
    for call_id, name, pieces in tool_uses:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        blocks.append((block, [{"type": "input_json_delta", "partial_json": p} for p in pieces]))
    for index, (block, deltas) in enumerate(blocks):
        events += block_events(index, block, deltas)
    reason = stop_reason or ("tool_use" if tool_uses else "end_turn")
    delta = {"stop_reason": reason, "stop_sequence": None}
    events.append(
        named({"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage[1]}})
    )
    if stop:
        events.append(named({"type": "message_stop"}))
    return events


def streamed(*texts: str, **options: Any) -> Canned:
    """A canned streamed reply (see `stream_events`), with no ``[DONE]`` marker."""
    return Canned(events=stream_events(*texts, **options), done_marker=False)


def multiline(name: str, data: dict[str, Any]) -> bytes:
    """An event with ``id`` and ``retry`` fields, its JSON over several ``data:`` lines."""
    lines = json.dumps(data, indent=1).splitlines()
    body = "".join(f"data: {line}\n" for line in lines)
    return f"event: {name}\nid: 7\nretry: 3000\n{body}\n".encode()
