"""`OpenAIChatClient`: a model client for any OpenAI-compatible chat-completions server.

One way through a call: `complete` and `stream` build the body (``_wire``),
send it under the client's concurrency limit, classify any failure
(``_failures``) and parse the reply. The client owns its ``httpx.AsyncClient``
unless given one, and is meant to be shared by every session of a system.
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from typing import TYPE_CHECKING, Any, Self

import httpx

from .._errors import ConfigurationError, Fatal, Recoverable, Transient
from .._log import get_logger
from .._redact import scrub, scrub_exception
from ..protocols import ModelReply, ReplyDelta
from ._credentials import api_key as checked_key
from ._credentials import register_http_client, shown_url
from ._failures import for_request, for_status, for_transport
from ._wire import StreamAssembly, parse_reply, request_body

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from types import TracebackType

    import anyio

    from ..protocols import Message, ToolSpec

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "ClientState", "OpenAIChatClient"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"

_logger = get_logger("arkhon_rheo.models")


class ClientState(enum.Enum):
    """Where a client is in its life."""

    #: Made, not entered: calls are refused until ``async with client``.
    UNOPENED = "unopened"
    #: Inside its ``async with`` (or given an ``httpx.AsyncClient`` it does not own).
    OPEN = "open"
    #: Left its ``async with``; it cannot be reopened.
    CLOSED = "closed"


class OpenAIChatClient:
    """A `StreamingModelClient` for OpenAI's API and servers that speak its chat completions.

    vLLM, llama.cpp's server, Ollama, LiteLLM and most hosted APIs do. Use it as
    an async context manager; share one instance between sessions (its
    ``limiter`` then bounds the calls in flight to the model)::

        async with OpenAIChatClient() as client:
            reply = await client.complete([UserMessage(content="Hi")])

    An agent needs no ``async with``: `react_agent` declares its client as a
    resource of the machine, which the `AgentSystem` driving it opens (once,
    unless it `is_open` already) and closes when it stops. A client cannot be
    reopened once closed: make a new one for a new system.

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
            ``max_tokens``, ``seed``...).

    Raises:
        ConfigurationError: A timeout is not a positive number; the API key is
            blank or holds a character an HTTP header cannot carry (non-ASCII,
            a control character, an inner space); a credential header of
            ``http_client`` cannot be sent as it is.
    """

    #: The provider, as OpenTelemetry's GenAI conventions name it (``gen_ai.system``).
    system = "openai"

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
    ) -> None:
        self.model = model or os.environ.get("ARKHON_MODEL") or DEFAULT_MODEL
        root = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        #: The API root, as it may be shown (a password in it masked).
        self.base_url = shown_url(root)
        # Checked, stripped and registered for scrubbing wherever it shows up.
        if api_key is not None:
            self._api_key = checked_key(api_key, "the api_key argument")
        else:
            self._api_key = checked_key(os.environ.get("OPENAI_API_KEY"), "OPENAI_API_KEY")
        if http_client is not None:
            register_http_client(http_client)
        for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigurationError(
                    f"{name} must be a positive number of seconds, got {value!r}"
                )
        self.timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self.limiter = limiter
        self.options = dict(options or {})
        #: The endpoint, as it may be shown; requests go to the real one.
        self.url = f"{self.base_url}/chat/completions"
        self._url = f"{root}/chat/completions"
        self._owns_http = http_client is None
        self._http = http_client
        self.state = ClientState.UNOPENED if http_client is None else ClientState.OPEN

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key=<{key}>, state={self.state.value})"
        )

    @property
    def is_open(self) -> bool:
        """Whether calls may be made now: inside its ``async with``, or given an ``http_client``.

        An `AgentSystem` whose machine declares this client as a resource (as
        `react_agent` does) enters it only when it is not open already.
        """
        return self.state is ClientState.OPEN

    async def __aenter__(self) -> Self:
        if self.state is ClientState.CLOSED:
            raise ConfigurationError(
                "cannot reopen an OpenAIChatClient once it has been closed; make a new one"
            )
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        self.state = ClientState.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.state = ClientState.CLOSED
        if self._owns_http and self._http is not None:
            await self._http.aclose()

    def request_body(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        stream: bool = False,
    ) -> dict[str, Any]:
        """The JSON body a call sends: model, messages, tools, options; no headers, no key."""
        return request_body(
            self.model,
            messages,
            tools=tools,
            json_mode=json_mode,
            stream=stream,
            options=self.options,
        )

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        """Ask the model; return its complete reply.

        Raises:
            Transient: Rate limited, a 5xx, a timeout, or a refused or dropped connection.
            Fatal: The server refused the request (400/401/403/404/422...), or the
                client is not open.
            Recoverable: The reply is not a chat-completions body.
        """
        http = self._open_http()
        body = self.request_body(messages, tools=tools, json_mode=json_mode)
        failure: Exception | None = None
        async with self._slot():
            try:
                response = await http.post(
                    self._url, json=body, headers=self._headers(), timeout=self.timeout
                )
            except Exception as exc:
                failure = self._request_failure(exc)
        if failure is not None:
            raise failure  # out of the except clause: no unscrubbed __context__
        if response.status_code >= 400:
            raise self._status_failure(response)
        return parse_reply(response.text, self.model)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """Stream the reply: a `ReplyDelta` per piece of text, then the full `ModelReply`.

        The reply's tool calls are assembled from their deltas, and its usage
        asked for with ``stream_options.include_usage``.

        Raises:
            Transient: As `complete`, and a stream that ends before its end marker.
            Fatal: As `complete`.
            Recoverable: An event that is not a chat-completions chunk.
        """
        http = self._open_http()
        body = self.request_body(messages, tools=tools, json_mode=json_mode, stream=True)
        assembly = StreamAssembly(self.model)
        index = 0
        bad: Recoverable | None = None
        failure: Exception | None = None
        async with self._slot():
            try:
                async with http.stream(
                    "POST", self._url, json=body, headers=self._headers(), timeout=self.timeout
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise self._status_failure(response)
                    # Read to the end of the body even past a bad event: httpx's
                    # iterators warn (on trio) when left unfinished.
                    async for line in response.aiter_lines():
                        if bad is not None or not line.startswith("data:"):
                            continue  # comments, event names, blank separators
                        try:
                            text = assembly.add(line[5:].strip())
                        except Recoverable as exc:
                            bad = exc
                            continue
                        if text:
                            yield ReplyDelta(text=text, index=index)
                            index += 1
            except Exception as exc:
                failure = self._request_failure(exc)
        if failure is not None:
            raise failure  # out of the except clause: no unscrubbed __context__
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

    def _open_http(self) -> httpx.AsyncClient:
        if self.state is not ClientState.OPEN or self._http is None:
            raise Fatal(
                f"the model client is {self.state.value}: use it inside "
                "`async with OpenAIChatClient(...) as client:`"
            )
        return self._http

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self.limiter if self.limiter is not None else contextlib.nullcontext()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _status_failure(self, response: httpx.Response) -> Exception:
        failure = for_status(
            response.status_code,
            response.text,
            response.headers.get("retry-after"),
            model=self.model,
            url=self.url,
            now=time.time(),
        )
        _logger.debug(
            "model_call_failed",
            model=self.model,
            url=self.url,
            status=response.status_code,
            error=str(failure),
        )
        return failure

    def _request_failure(self, exc: Exception) -> Exception:
        """What to raise for what a request raised, scrubbed of secrets, chain included.

        A transport failure or a `UnicodeError` as a classified error chained to
        it; anything else (an ``http_client``'s event hook...) as it is, so the
        session's classifier decides, unless it cannot be scrubbed in place.
        """
        cleaned = scrub_exception(exc)  # its args and its whole chain
        if isinstance(exc, httpx.TransportError):
            timeouts = f"connect {self.timeout.connect:g} s, read {self.timeout.read:g} s"
            failure: Exception = for_transport(
                exc, model=self.model, url=self.url, timeouts=timeouts
            )
        elif isinstance(exc, UnicodeError) or cleaned is not exc:
            failure = for_request(exc, model=self.model, url=self.url)
        else:
            failure = exc
        if failure is not exc:
            failure.__cause__ = cleaned
            _logger.debug(
                "model_call_failed", model=self.model, url=self.url, error=scrub(str(failure))
            )
        return failure
