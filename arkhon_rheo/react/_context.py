"""What the model is sent each turn: the conversation trimmed or summarised, and a prompt cache."""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass
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

    from ..protocols import ResponseSchema

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "ContextWindow",
    "PromptCache",
    "Summarize",
    "estimate_tokens",
    "trim_messages",
]

_MESSAGES = TypeAdapter(tuple[Message, ...])

#: What the model is told when it folds the oldest turns into a summary (`Summarize`).
DEFAULT_SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use, as you will see it instead of "
    "those turns: keep the user's task and requests, the facts found (with the tools' results "
    "that matter), the decisions made and what is left to do. Be concise; no preamble."
)


@dataclass(frozen=True, slots=True)
class Summarize:
    """Fold the oldest turns into a summary once the conversation passes a token budget.

    ``react_agent(model, tools, memory=Summarize(max_tokens=8_000))``: before a
    model turn, when the estimate (`estimate_tokens`) of the conversation passes
    ``max_tokens``, the agent makes one recorded model call that summarises its
    oldest messages and commits, as a step of its own, a conversation where they
    are one summary message (a `SystemMessage` after the system prompt), with
    ``state.summary`` and ``state.summaries`` counting. The system prompt and the
    last ``keep_last`` messages stay as they are; a tool call is never kept without
    its results (the cut moves back to the call). An earlier summary is folded
    into the next one.

    Attributes:
        max_tokens: The estimate past which the oldest turns are summarised.
        keep_last: How many of the latest messages stay as they are (at least 1).
        prompt: The instructions of the summarising call (the turns follow them).

    Raises:
        ConfigurationError: ``max_tokens`` or ``keep_last`` is below 1, or ``prompt`` is empty.
    """

    max_tokens: int
    keep_last: int = 4
    prompt: str = DEFAULT_SUMMARY_PROMPT

    def __post_init__(self) -> None:
        for label, value in (("max_tokens", self.max_tokens), ("keep_last", self.keep_last)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"Summarize: {label} must be an int >= 1, got {value!r}")
        if not self.prompt.strip():
            raise ConfigurationError("Summarize: prompt must not be empty")


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
    everything = tuple(messages)
    if max_tokens is None:
        return everything
    return _trimmed(everything, [estimate_tokens(m) for m in everything], max_tokens)


class ContextWindow:
    """`trim_messages` for one growing conversation: each message estimated once.

    A session's think stage keeps one. It remembers the messages it has
    estimated (by identity) and their running total, so a turn estimates only
    the messages new since the last, and a conversation that fits is sent
    whole without a walk over it; one that does not is trimmed walking back
    from its end, over the turns it keeps. A conversation that is not the
    last one grown (edited, or another session's) is estimated again from
    where they differ.
    """

    __slots__ = ("_known", "_sizes", "_total")

    def __init__(self) -> None:
        self._known: list[Message] = []
        self._sizes: list[int] = []
        self._total = 0

    def trim(self, messages: tuple[Message, ...], max_tokens: int | None) -> tuple[Message, ...]:
        """What `trim_messages` returns for ``messages``, at the cost of their new part."""
        if max_tokens is None:
            return messages
        self._update(messages)
        if self._total <= max_tokens:
            return messages  # it fits: every turn stays
        return _trimmed(messages, self._sizes, max_tokens)

    def size(self, messages: tuple[Message, ...]) -> int:
        """The estimate of ``messages`` (their `estimate_tokens`), at the cost of their new part."""
        self._update(messages)
        return self._total

    def _update(self, messages: tuple[Message, ...]) -> None:
        known, sizes = self._known, self._sizes
        count = len(known)
        if count > len(messages) or not all(map(operator.is_, known, messages)):
            count = _common(known, messages)
            del known[count:]
            del sizes[count:]
            self._total = sum(sizes)
        for message in messages[count:]:
            size = estimate_tokens(message)
            known.append(message)
            sizes.append(size)
            self._total += size


def _common(known: list[Message], messages: tuple[Message, ...]) -> int:
    """How many leading messages ``known`` and ``messages`` share (by identity)."""
    for index, (a, b) in enumerate(zip(known, messages, strict=False)):
        if a is not b:
            return index
    return min(len(known), len(messages))


def _trimmed(
    messages: tuple[Message, ...], sizes: Sequence[int], max_tokens: int
) -> tuple[Message, ...]:
    """The leading system messages, then the newest turns that fit (at least one).

    Walks back from the end, a turn at a time (a message and the tool results
    after it), and stops at the first turn that does not fit.
    """
    count = len(messages)
    head = 0
    while head < count and isinstance(messages[head], SystemMessage):
        head += 1
    used = sum(sizes[:head])
    start = count
    while start > head:
        first = start - 1
        cost = sizes[first]
        while first > head and isinstance(messages[first], ToolMessage):
            first -= 1
            cost += sizes[first]
        if start < count and used + cost > max_tokens:
            break
        used += cost
        start = first
    return messages[:head] + messages[start:]


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
    def key(
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        json_mode: bool,
        schema: ResponseSchema | None = None,
    ) -> str:
        """The cache key of one prompt: a digest of everything the model is sent.

        The answer's schema is part of it (``react_agent(answer_type=)``'s,
        whether the client sends it or the prompt does): two agents with the
        same messages and different answer types never share a reply.
        """
        payload = {
            "messages": _MESSAGES.dump_python(tuple(messages), mode="json"),
            "tools": [spec.model_dump(mode="json") for spec in tools],
            "json_mode": json_mode,
            "schema": None if schema is None else schema.model_dump(mode="json"),
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
