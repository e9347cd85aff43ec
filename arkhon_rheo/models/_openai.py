"""`OpenAIChatClient`: a model client for any OpenAI-compatible chat-completions server.

One way through a call: `complete` and `stream` build the body (``_wire``),
send it under the client's concurrency limit (``_http``: a stream's events
read through ``httpx-sse``), classify any failure (``_failures``) and parse
the reply. The client owns its ``httpx.AsyncClient``
unless given one, and is meant to be shared by every session of a system.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, Recoverable, Transient
from ..protocols import ModelReply, ReplyDelta
from ._failures import for_stream_error
from ._http import ClientState, HTTPModelClient
from ._wire import StreamAssembly, Structured, parse_reply, request_body

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    import anyio
    import httpx

    from ..protocols import Message, ResponseSchema, ToolSpec

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "ClientState", "OpenAIChatClient"]

#: The server an `OpenAIChatClient` calls without ``base_url`` or ``OPENAI_BASE_URL``.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The model an `OpenAIChatClient` asks for without ``model`` or ``ARKHON_MODEL``.
DEFAULT_MODEL = "gpt-4o-mini"


class OpenAIChatClient(HTTPModelClient):
    """A `StreamingModelClient` for OpenAI's API and servers that speak its chat completions.

    vLLM, llama.cpp's server, Ollama, LiteLLM and most hosted APIs do. Use it as
    an async context manager; share one instance between sessions (its
    ``limiter`` then bounds the calls in flight to the model)::

        async with OpenAIChatClient() as client:
            reply = await client.complete([UserMessage(content="Hi")])

    An agent needs no ``async with``: `react_agent` declares its client as a
    resource of the machine, which each `AgentSystem` driving it enters (once)
    and leaves when it stops. Opens are counted: one client serves any number
    of systems, one after another or at once, and is closed when the last one
    that opened it leaves it (a client you opened yourself stays open until you
    leave it).

    Each argument left out is read from the environment when the client is made:

    * ``model``: ``ARKHON_MODEL``, else ``"gpt-4o-mini"``;
    * ``api_key``: ``OPENAI_API_KEY`` (none is sent when neither is set, for
      local servers);
    * ``base_url``: ``OPENAI_BASE_URL``, else ``"https://api.openai.com/v1"``.

    Failures are raised classified: rate limits (429, honouring ``Retry-After``),
    5xx, timeouts and refused or dropped connections as `Transient` (the
    supervisor retries the stage after its backoff); 400/401/403/404/422, and
    a request that cannot be sent, as `Fatal` with a message saying what to
    fix; a body that is not a chat-completions reply as `Recoverable`.

    A typed answer (the ``schema`` a `react_agent` with ``answer_type`` passes)
    is asked for as ``structured`` says: ``"json_schema"`` (OpenAI's
    structured outputs: ``response_format`` of type ``json_schema``, ``strict``
    when the schema allows it), ``"json_object"`` (JSON mode, with an
    instruction line naming JSON and the schema) or ``"instructions"`` (the
    instruction line alone, for servers that take no ``response_format``).
    JSON mode is never sent without the word "JSON" in the messages.

    Every secret the client is given (the API key, a password in the base URL,
    the credential headers, query parameters and basic auth of
    ``http_client``) is registered for scrubbing: it appears in no error, no
    chained cause and no ``args`` of one, no ``repr`` and no log line, and a
    reply quoting it comes back with it masked. `request_body` (what to
    record) has no headers. ``base_url`` and ``url`` show the URL with its
    password masked. A key's surrounding whitespace (a key read from a file
    keeps its newline) is stripped.

    Args:
        model: The model to ask.
        api_key: The API key, sent as a bearer token.
        base_url: The server's API root (the ``/chat/completions`` path is added).
        http_client: An ``httpx.AsyncClient`` to send with; its owner closes it.
        connect_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for each read (between streamed chunks too).
        limiter: Bounds the calls in flight through this client (shared by every
            session using it); unbounded when ``None``.
        options: Further body fields sent with every request (``temperature``,
            ``max_tokens``, ``top_p``...).
        structured: How a typed answer's schema is sent: ``"json_schema"``,
            ``"json_object"`` or ``"instructions"``.

    Raises:
        ConfigurationError: ``structured`` is none of its three values; a
            timeout is not a positive number; the API key is
            blank or holds a character an HTTP header cannot carry (non-ASCII,
            a control character, an inner space); a credential header of
            ``http_client`` cannot be sent as it is.
    """

    #: The provider, as OpenTelemetry's GenAI conventions name it (``gen_ai.system``).
    system = "openai"
    _KEY_HINT = "OPENAI_API_KEY"
    _URL_HINT = "OPENAI_BASE_URL, usually ending in /v1"

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
        options: Mapping[str, Any] | None = None,
        structured: Structured = "json_schema",
    ) -> None:
        if structured not in ("json_schema", "json_object", "instructions"):
            raise ConfigurationError(
                "structured must be 'json_schema', 'json_object' or 'instructions', "
                f"got {structured!r}"
            )
        self.structured: Structured = structured
        key: str | None = api_key
        source = "the api_key argument"
        if api_key is None:
            key, source = os.environ.get("OPENAI_API_KEY"), "OPENAI_API_KEY"
        super().__init__(
            model or os.environ.get("ARKHON_MODEL") or DEFAULT_MODEL,
            api_key=key,
            key_source=source,
            root=base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            path="/chat/completions",
            http_client=http_client,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            limiter=limiter,
            options=options,
        )

    def request_body(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        stream: bool = False,
        schema: ResponseSchema | None = None,
    ) -> dict[str, Any]:
        """The JSON body a call sends: model, messages, tools, options; no headers, no key."""
        return request_body(
            self.model,
            messages,
            tools=tools,
            json_mode=json_mode,
            schema=schema,
            structured=self.structured,
            stream=stream,
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
            Transient: Rate limited, a 5xx, a timeout, or a refused or dropped connection.
            Fatal: The server refused the request (400/401/403/404/422...), or the
                client is not open.
            Recoverable: The reply is not a chat-completions body.
        """
        body = self.request_body(messages, tools=tools, json_mode=json_mode, schema=schema)
        response = await self._post(body)
        return parse_reply(response.text, self.model)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """Stream the reply: a `ReplyDelta` per piece of text, then the full `ModelReply`.

        The reply's tool calls are assembled from their deltas, and its usage
        asked for with ``stream_options.include_usage``.

        Events are read through ``httpx-sse``: ``data:`` spread over several
        lines, ``event:``, ``id:`` and ``retry:`` fields are understood; an
        ``error`` event fails the call, classified by its error's type.

        Raises:
            Transient: As `complete`, a stream that ends before its end marker,
                and an ``error`` event for a failure a retry may get past.
            Fatal: As `complete`, and an ``error`` event refusing the request.
            Recoverable: An event that is not a chat-completions chunk, or a
                reply that is not an event stream.
        """
        body = self.request_body(
            messages, tools=tools, json_mode=json_mode, stream=True, schema=schema
        )
        assembly = StreamAssembly(self.model)
        index = 0
        bad: Exception | None = None
        # Read to the end of the body even past a bad event: httpx's iterators
        # warn (on trio) when left unfinished.
        async with contextlib.aclosing(self._events(body)) as events:
            async for event in events:
                if bad is not None:
                    continue
                if event.event == "error":
                    data = _json_or_text(event.data)
                    bad = for_stream_error(data, model=self.model, url=self.url)
                    continue
                try:
                    text = assembly.add(event.data)
                except Recoverable as exc:
                    bad = exc
                    continue
                if text:
                    yield ReplyDelta(text=text, index=index)
                    index += 1
        if bad is not None:
            raise bad
        if not assembly.done and assembly.finish is None:
            raise Transient(
                f"model {self.model!r} at {self.url}: the stream ended before its end marker "
                "(the connection was closed early)"
            )
        held = assembly.flush()
        if held:
            yield ReplyDelta(text=held, index=index)
        yield assembly.reply()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers


def _json_or_text(data: str) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return data
