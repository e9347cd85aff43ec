"""`GovernedClient`: any model client, its calls paced by a `RateGovernor`.

`governed` wraps a client (OpenAI's, Anthropic's, a user's own) so that each
call first takes a slot on its key's lane and gives it back with the reply's
usage. The ReAct engine governs every client that names a ``base_url`` by the
process's default governor (`governing`), so nothing needs wrapping unless a
client should use another governor or key. The wrapper sits inside the call
a stage records: a replay, which makes no call, never waits on a governor.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Self

from .._errors import ConfigurationError
from ..protocols import ModelClient, ModelReply, StreamingModelClient
from ..protocols._seams import takes_schema
from ._governor import RateGovernor, default_governor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from types import TracebackType

    from ..protocols import Message, ReplyDelta, ResponseSchema, ToolSpec

__all__ = ["GovernedClient", "estimate_tokens", "governed", "governing"]

#: Option names under which clients keep the most tokens a reply may use.
_MAX_TOKEN_OPTIONS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """A cheap estimate of a prompt's tokens: about four characters a token, four a message."""
    size = 0
    for message in messages:
        content = getattr(message, "content", None)
        size += len(content) if isinstance(content, str) else 0
        for call in getattr(message, "tool_calls", ()):
            size += len(call.name) + len(call.arguments)
        size += 16
    for spec in tools:
        size += len(spec.name) + len(spec.description) + len(json.dumps(spec.parameters))
    return size // 4


def _max_reply_tokens(client: object) -> int:
    """The most tokens a reply of ``client`` may use, as its options say (0 when unknown)."""
    value = getattr(client, "max_tokens", None)
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    options = getattr(client, "options", None)
    if isinstance(options, dict):
        for name in _MAX_TOKEN_OPTIONS:
            value = options.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return max(0, value)
    return 0


class GovernedClient:
    """A model client whose calls each take a slot of its key on a `RateGovernor`.

    Made by `governed`; it answers as the client it wraps (its ``system``,
    ``model``, ``base_url``, ``async with``, ``is_open`` and ``counts_opens``
    are the client's).

    Attributes:
        client: The wrapped client.
        governor: The governor its calls wait on.
        key: Its model key on that governor.
        max_reply_tokens: The tokens a reply is counted as before its usage is known.
    """

    def __init__(
        self,
        client: ModelClient,
        governor: RateGovernor,
        key: str,
        max_reply_tokens: int,
    ) -> None:
        self.client = client
        self.governor = governor
        self.key = key
        self.max_reply_tokens = max_reply_tokens
        #: Whether the wrapped client takes a typed answer's ``schema``.
        self.takes_schema = takes_schema(client)

    def _schema(self, schema: ResponseSchema | None) -> dict[str, Any]:
        """The ``schema`` keyword for the wrapped client (none if it takes none)."""
        return {"schema": schema} if schema is not None and self.takes_schema else {}

    def __repr__(self) -> str:
        return f"governed({self.client!r}, key={self.key!r})"

    @property
    def system(self) -> str:
        """The wrapped client's provider name (``gen_ai.system``)."""
        return str(getattr(self.client, "system", None) or type(self.client).__name__)

    @property
    def model(self) -> str:
        """The wrapped client's model name."""
        return str(getattr(self.client, "model", None) or "")

    @property
    def base_url(self) -> str | None:
        """The wrapped client's ``base_url``, if it has one."""
        value = getattr(self.client, "base_url", None)
        return value if isinstance(value, str) else None

    @property
    def is_open(self) -> bool:
        """Whether the wrapped client is open (one that needs no opening always is)."""
        if not hasattr(type(self.client), "__aenter__"):
            return True
        return getattr(self.client, "is_open", False) is True

    @property
    def counts_opens(self) -> bool:
        """Whether the wrapped client counts its opens (so every system enters it)."""
        return getattr(self.client, "counts_opens", False) is True

    async def __aenter__(self) -> Self:
        enter = getattr(self.client, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        leave = getattr(self.client, "__aexit__", None)
        if leave is not None:
            await leave(exc_type, exc, tb)

    def estimate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """What a call is counted as until its reply's usage is known."""
        return estimate_tokens(messages, tools) + self.max_reply_tokens

    def _tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """The estimate, made only when the key limits tokens (it reads the whole prompt)."""
        limit = self.governor.limit_of(self.key)
        if limit is None or limit.tokens_per_minute is None:
            return 0
        return self.estimate(messages, tools)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> ModelReply:
        """The wrapped client's reply, once the governor lets the call go."""
        tokens = self._tokens(messages, tools)
        more = self._schema(schema)
        async with self.governor.slot(self.key, tokens=tokens) as permit:
            reply = await self.client.complete(messages, tools=tools, json_mode=json_mode, **more)
            if reply.usage.total_tokens:
                permit.used(reply.usage.total_tokens)
        return reply


class GovernedStreamingClient(GovernedClient):
    """A `GovernedClient` of a client that streams: its streams are governed too."""

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """The wrapped client's stream, once the governor lets the call go."""
        client = self.client
        assert isinstance(client, StreamingModelClient)
        tokens = self._tokens(messages, tools)
        more = self._schema(schema)
        async with self.governor.slot(self.key, tokens=tokens) as permit:
            chunks = client.stream(messages, tools=tools, json_mode=json_mode, **more)
            try:
                async for chunk in chunks:
                    if isinstance(chunk, ModelReply) and chunk.usage.total_tokens:
                        permit.used(chunk.usage.total_tokens)
                    yield chunk
            finally:
                close: Any = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()


def governed(
    client: ModelClient,
    governor: RateGovernor | None = None,
    *,
    key: str | None = None,
    max_reply_tokens: int | None = None,
) -> GovernedClient:
    """Wrap ``client`` so its calls are paced by ``governor`` under ``key``.

    ::

        governor = RateGovernor({"gpt": RateLimit(requests_per_minute=60)})
        agent = react_agent(governed(OpenAIChatClient(), governor, key="gpt"), tools)

    Args:
        client: Any `ModelClient`; a `StreamingModelClient` stays one.
        governor: The governor (the process's default when None).
        key: The model key (by default `RateGovernor.key_of` the client: its
            provider, base URL and model; clients that share it share limits).
        max_reply_tokens: The tokens a reply counts as until its usage is
            known (by default the client's ``max_tokens`` option, else 0).

    Raises:
        ConfigurationError: ``client`` is no model client, there is no governor
            (none given and the default turned off), or ``key`` is empty.
    """
    if not isinstance(client, ModelClient):
        raise ConfigurationError(
            f"governed() takes a model client (with complete()), got {type(client).__name__}"
        )
    if isinstance(client, GovernedClient):
        client = client.client
    chosen = default_governor() if governor is None else governor
    if not isinstance(chosen, RateGovernor):
        raise ConfigurationError(
            "governed(): no governor given and the default one is turned off "
            "(set_default_governor(None)); pass a RateGovernor"
        )
    if key is not None and (not isinstance(key, str) or not key):
        raise ConfigurationError(f"governed(key={key!r}): a key is a non-empty string")
    reply_tokens = _max_reply_tokens(client) if max_reply_tokens is None else max_reply_tokens
    kind = GovernedStreamingClient if isinstance(client, StreamingModelClient) else GovernedClient
    return kind(client, chosen, key or chosen.key_of(client), max(0, int(reply_tokens)))


def governing(client: ModelClient) -> ModelClient:
    """The client an engine should call: governed by default if it names a ``base_url``.

    A `GovernedClient` is used as it is; a client with a ``base_url`` (a
    network client) is governed by the process's default governor, unless
    that is turned off; any other client (a scripted one) is called directly.
    """
    if isinstance(client, GovernedClient):
        return client
    governor = default_governor()
    if governor is None or not isinstance(getattr(client, "base_url", None), str):
        return client
    kind = GovernedStreamingClient if isinstance(client, StreamingModelClient) else GovernedClient
    return kind(client, governor, governor.key_of(client), _max_reply_tokens(client))
