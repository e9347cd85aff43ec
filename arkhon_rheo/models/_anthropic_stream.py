"""Anthropic's streamed Messages events folded into one `ModelReply`.

The events, in order: ``message_start`` (the model, the prompt's usage),
then per content block ``content_block_start``, ``content_block_delta``
(``text_delta`` pieces of text, ``input_json_delta`` pieces of a tool call's
arguments) and ``content_block_stop``; then ``message_delta`` (the stop
reason, the output's usage) and ``message_stop``. ``ping`` events are
skipped; an ``error`` event is the client's to classify. Text comes out
scrubbed of registered secrets as it arrives (a piece that may begin one
waits for the next), as in ``_wire``.
"""

from __future__ import annotations

import json
from typing import Any

from .._redact import StreamScrubber, scrub, scrub_secrets
from ..protocols import AssistantMessage, ModelReply, ToolCall, Usage
from ._anthropic_wire import bad, finish_reason, tool_call, usage

__all__ = ["StreamAssembly"]


class StreamAssembly:
    """Folds the events of a streamed Messages reply into one `ModelReply`.

    `add` takes one event's data (its JSON text) and returns the text it
    adds; tool calls are assembled by their block's ``index`` (the id and
    name in ``content_block_start``, the arguments in ``input_json_delta``
    pieces). ``done`` is set by ``message_stop``.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.served_by = ""
        self.text: list[str] = []
        self.calls: dict[int, tuple[dict[str, Any], list[str]]] = {}
        self.stop: Any = None
        self.usage = Usage()
        self.done = False
        self.error: Any = None
        self._scrubber = StreamScrubber()

    def add(self, data: str) -> str:
        """Take one event's data; return the text it adds.

        An ``error`` event is kept in ``error`` (the caller raises it, classified).

        Raises:
            Recoverable: The event is not JSON or not a Messages stream event.
        """
        try:
            event = json.loads(data)
            text = self._event(event)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise bad(
                f"a stream event does not parse ({exc!r}): {scrub(data)[:80]!r}", self.model
            ) from None
        text = self._scrubber.feed(text) if text else ""
        if text:
            self.text.append(text)
        return text

    def _event(self, event: dict[str, Any]) -> str:
        kind = event["type"]
        if kind == "content_block_delta":
            return self._delta(int(event["index"]), event["delta"])
        if kind == "content_block_start":
            block = event["content_block"]
            if block["type"] == "tool_use":
                self.calls[int(event["index"])] = (block, [])
            elif block["type"] == "text":
                return _text(block.get("text") or "")
        elif kind == "message_start":
            message = event["message"]
            self.served_by = scrub_secrets(str(message.get("model") or ""))
            self.usage = usage(message.get("usage"), self.usage)
        elif kind == "message_delta":
            self.stop = event["delta"].get("stop_reason", self.stop)
            self.usage = usage(event.get("usage"), self.usage)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = event
        return ""  # ping, content_block_stop, and events added since

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        kind = delta["type"]
        if kind == "text_delta":
            return _text(delta["text"])
        if kind == "input_json_delta":
            self.calls[index][1].append(str(delta["partial_json"]))
        return ""  # thinking, signature and citations deltas are left out

    def flush(self) -> str:
        """The text held back at the end of the stream (part of a secret is masked)."""
        text = self._scrubber.flush()
        if text:
            self.text.append(text)
        return text

    def reply(self) -> ModelReply:
        """The reply the stream made (with any text `flush` had not yet given)."""
        self.flush()
        calls: tuple[ToolCall, ...] = tuple(
            tool_call(block, "".join(pieces) if pieces else None)
            for _, (block, pieces) in sorted(self.calls.items())
        )
        return ModelReply(
            message=AssistantMessage(content="".join(self.text) or None, tool_calls=calls),
            finish_reason=finish_reason(self.stop, has_tool_calls=bool(calls)),
            usage=self.usage,
            model=self.served_by or self.model,
        )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a text delta is {type(value).__name__}, not text")
    return value
