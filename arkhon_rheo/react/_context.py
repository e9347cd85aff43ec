"""What the model is sent each turn: the conversation trimmed to fit, and a prompt cache."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from .._errors import ConfigurationError
from .._lru import LRU
from ..protocols import (
    AssistantMessage,
    Message,
    ModelReply,
    SystemMessage,
    ToolMessage,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["PromptCache", "estimate_tokens", "trim_messages"]

_MESSAGES = TypeAdapter(tuple[Message, ...])


def estimate_tokens(message: Message) -> int:
    """A cheap token estimate: about four characters a token, plus a few per message."""
    size = len(message.content or "") if not isinstance(message, AssistantMessage) else 0
    if isinstance(message, AssistantMessage):
        size = len(message.content or "") + sum(
            len(call.name) + len(call.arguments) for call in message.tool_calls
        )
    return size // 4 + 4


def trim_messages(messages: Sequence[Message], max_tokens: int | None) -> tuple[Message, ...]:
    """Drop the oldest turns until the estimate fits ``max_tokens``.

    The leading system messages always stay, and so does the most recent turn.
    A turn is a user message, or an assistant message together with the tool
    results that answer it: an assistant's tool calls are never kept without
    their results, nor results without their calls.

    Args:
        messages: The conversation.
        max_tokens: The budget for the estimate; ``None`` keeps everything.

    Returns:
        The messages to send, in order.
    """
    if max_tokens is None:
        return tuple(messages)
    head = 0
    while head < len(messages) and isinstance(messages[head], SystemMessage):
        head += 1
    units: list[list[Message]] = []
    for message in messages[head:]:
        if isinstance(message, ToolMessage) and units:
            units[-1].append(message)
        else:
            units.append([message])
    used = sum(estimate_tokens(m) for m in messages[:head])
    kept: list[list[Message]] = []
    for unit in reversed(units):
        cost = sum(estimate_tokens(m) for m in unit)
        if kept and used + cost > max_tokens:
            break
        kept.append(unit)
        used += cost
    return (*messages[:head], *(m for unit in reversed(kept) for m in unit))


class PromptCache:
    """A bounded cache of model replies by exact prompt, shared by the sessions of a machine.

    A hit answers a turn without calling the model (its usage counts as zero).
    It is replay-safe: the engine consults it inside the recorded model call,
    so a replay answers from the record whether the run hit the cache or not.

    Args:
        maxsize: How many replies to keep; the least recently used goes first.
    """

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize < 1:
            raise ConfigurationError(f"PromptCache(maxsize={maxsize}): keep at least one reply")
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._replies: LRU[str, ModelReply] = LRU(maxsize)

    @staticmethod
    def key(messages: Sequence[Message], tools: Sequence[ToolSpec], json_mode: bool) -> str:
        """The cache key of one prompt: a digest of everything the model is sent."""
        payload = {
            "messages": _MESSAGES.dump_python(tuple(messages), mode="json"),
            "tools": [spec.model_dump(mode="json") for spec in tools],
            "json_mode": json_mode,
        }
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def get(self, key: str) -> ModelReply | None:
        """The reply cached for ``key`` (with zero usage), or None."""
        reply = self._replies.get(key)
        if reply is None:
            self.misses += 1
            return None
        self.hits += 1
        return reply.model_copy(update={"usage": Usage()})

    def put(self, key: str, reply: ModelReply) -> None:
        """Remember ``reply`` for ``key``, dropping the least recently used beyond ``maxsize``."""
        self._replies.put(key, reply)

    def __len__(self) -> int:
        return len(self._replies)
