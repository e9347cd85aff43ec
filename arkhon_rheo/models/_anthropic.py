"""`AnthropicClient`: a model client for Anthropic's Messages API, on httpx.

One way through a call, as `OpenAIChatClient`'s: `complete` and `stream`
build the body (``_anthropic_wire``), send it under the client's concurrency
limit (``_http``: a stream's events read through ``httpx-sse``), classify
any failure (``_failures``) and parse the reply (``_anthropic_stream`` for a
stream).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, Recoverable, Transient
from ..protocols import ModelReply, ReplyDelta
from ._anthropic_stream import StreamAssembly
from ._anthropic_wire import parse_message, request_body, with_answer
from ._failures import for_stream_error
from ._http import HTTPModelClient

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    import anyio
    import httpx

    from ..protocols import Message, ResponseSchema, ToolSpec

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_ANTHROPIC_MODEL",
    "AnthropicClient",
]

#: The server an `AnthropicClient` calls without ``base_url`` or ``ANTHROPIC_BASE_URL``.
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
#: The model an `AnthropicClient` asks for without ``model`` or ``ARKHON_MODEL``.
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
#: The ``anthropic-version`` header every request carries.
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicClient(HTTPModelClient):
    """A `StreamingModelClient` for Anthropic's Messages API (``POST {base}/v1/messages``).

    Used as `OpenAIChatClient` is: share one instance between sessions, as
    an async context manager or as a resource of an agent (`react_agent`
    declares it; the `AgentSystem` opens and closes it)::

        async with AnthropicClient("claude-haiku-4-5") as client:
            reply = await client.complete([UserMessage(content="Hi")])

    Each argument left out is read from the environment when the client is made:

    * ``model``: ``ARKHON_MODEL``, else ``"claude-haiku-4-5"``;
    * ``api_key``: ``ANTHROPIC_API_KEY``, sent as ``x-api-key`` (none is sent
      when neither is set, for local servers);
    * ``base_url``: ``ANTHROPIC_BASE_URL``, else ``"https://api.anthropic.com"``:
      the server's root, without ``/v1``, as Anthropic's own SDK takes it.

    The conversation maps onto Anthropic's turns: leading system messages
    become the top-level ``system``, tool calls ``tool_use`` blocks, tool
    results ``tool_result`` blocks of one user turn (``is_error`` kept).
    ``json_mode`` adds an instruction to the system prompt (the API has no
    JSON mode). A typed answer's ``schema`` (what a `react_agent` with
    ``answer_type`` passes) is offered as a tool whose ``input_schema`` is the
    answer's, forced by ``tool_choice`` (``{"type": "tool"}`` naming it; with
    other tools offered, ``{"type": "any"}``); its call comes back as the
    reply's text, the answer as JSON. Usage counts every prompt token in ``prompt_tokens``, the
    cached ones in ``cache_read_tokens`` and ``cache_creation_tokens``.

    Failures are raised classified, as `OpenAIChatClient`'s: 429 (rate
    limited), 529 (overloaded) and 5xx, honouring ``retry-after``, timeouts
    and refused or dropped connections as `Transient` (``retry_after`` set
    from the header); 400/401/403/404/413 as `Fatal` with what to fix (the
    key, the model name, the request's size); a body that is not a Messages
    reply as `Recoverable`. An ``error`` event mid-stream is `Transient`
    (``overloaded_error``, ``api_error``...) or `Fatal` (``invalid_request_error``...).
    Secrets are registered and scrubbed exactly as `OpenAIChatClient`'s are.

    Args:
        model: The model to ask.
        api_key: The API key, sent as ``x-api-key``.
        base_url: The server's root, without ``/v1`` (``/v1/messages`` is added).
        http_client: An ``httpx.AsyncClient`` to send with; its owner closes it.
        connect_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for each read (between streamed events too).
        limiter: Bounds the calls in flight through this client (shared by every
            session using it); unbounded when ``None``.
        max_tokens: The most tokens a reply may have (the API requires a bound).
        cache_prompt: Mark the system prompt, the tools and the last user turn
            with ``cache_control: {"type": "ephemeral"}`` for the prompt cache.
        options: Further body fields sent with every request (``temperature``,
            ``stop_sequences``, ``metadata``...); they override the client's.
            Further headers (an ``anthropic-beta`` feature) go on ``http_client``.

    Raises:
        ConfigurationError: A timeout or ``max_tokens`` is not a positive
            number; the API key is blank or holds a character an HTTP header
            cannot carry; a credential header of ``http_client`` cannot be sent.
    """

    #: The provider, as OpenTelemetry's GenAI conventions name it (``gen_ai.system``).
    system = "anthropic"
    _KEY_HINT = "ANTHROPIC_API_KEY"
    _URL_HINT = "ANTHROPIC_BASE_URL, the server's root without /v1"

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
        limiter: anyio.CapacityLimiter | None = None,
        max_tokens: int = 4096,
        cache_prompt: bool = False,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigurationError(
                f"max_tokens must be a positive whole number of tokens, got {max_tokens!r}"
            )
        key: str | None = api_key
        source = "the api_key argument"
        if api_key is None:
            key, source = os.environ.get("ANTHROPIC_API_KEY"), "ANTHROPIC_API_KEY"
        super().__init__(
            model or os.environ.get("ARKHON_MODEL") or DEFAULT_ANTHROPIC_MODEL,
            api_key=key,
            key_source=source,
            root=base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_ANTHROPIC_BASE_URL,
            path="/v1/messages",
            http_client=http_client,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            limiter=limiter,
            options=options,
        )
        self.max_tokens = max_tokens
        self.cache_prompt = cache_prompt

    def request_body(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        stream: bool = False,
        schema: ResponseSchema | None = None,
    ) -> dict[str, Any]:
        """The JSON body a call sends: model, system, messages, tools, options; no headers."""
        return request_body(
            self.model,
            messages,
            tools=tools,
            json_mode=json_mode,
            schema=schema,
            stream=stream,
            max_tokens=self.max_tokens,
            cache=self.cache_prompt,
            options=self.options,
        )

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> ModelReply:
        """Ask the model; return its complete reply (``schema``: a typed answer's, see above).

        Raises:
            Transient: Rate limited (429), overloaded (529), a 5xx, a timeout, or
                a refused or dropped connection.
            Fatal: The server refused the request (400/401/403/404/413...), or the
                client is not open.
            Recoverable: The reply is not a Messages body.
        """
        body = self.request_body(messages, tools=tools, json_mode=json_mode, schema=schema)
        response = await self._post(body)
        return with_answer(parse_message(response.text, self.model), schema)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """Stream the reply: a `ReplyDelta` per piece of text, then the full `ModelReply`.

        Tool calls are assembled from their ``input_json_delta`` pieces; the
        usage from ``message_start`` and ``message_delta``.

        Raises:
            Transient: As `complete`, a stream that ends before ``message_stop``,
                and an ``error`` event a retry may get past (``overloaded_error``).
            Fatal: As `complete`, and an ``error`` event refusing the request.
            Recoverable: An event that is not a Messages stream event, or a
                reply that is not an event stream.
        """
        body = self.request_body(
            messages, tools=tools, json_mode=json_mode, stream=True, schema=schema
        )
        assembly = StreamAssembly(self.model)
        index = 0
        bad: Exception | None = None
        # Read to the end of the body even past a bad event (see OpenAIChatClient.stream).
        async with contextlib.aclosing(self._events(body)) as events:
            async for event in events:
                if bad is not None:
                    continue
                try:
                    text = assembly.add(event.data)
                except Recoverable as exc:
                    bad = exc
                    continue
                if assembly.error is not None:
                    bad = for_stream_error(assembly.error, model=self.model, url=self.url)
                elif text:
                    yield ReplyDelta(text=text, index=index)
                    index += 1
        if bad is not None:
            raise bad
        if not assembly.done:
            raise Transient(
                f"model {self.model!r} at {self.url}: the stream ended before message_stop "
                "(the connection was closed early)"
            )
        held = assembly.flush()
        if held:
            yield ReplyDelta(text=held, index=index)
        yield with_answer(assembly.reply(), schema)

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers
