"""What the HTTP model clients share: their life, their limiter, and one way to send.

`HTTPModelClient` owns (or is given) an ``httpx.AsyncClient``, checks and
registers its secrets, counts its opens (so that any number of agent systems
may open one client, one after another or at once, in one event loop or
several), and sends a JSON body either for one reply (`_post`)
or as a stream of server-sent events read through ``httpx-sse`` (`_events`:
multi-line ``data:``, ``event:``, ``id:`` and ``retry:`` fields). Every
failure comes out classified (``_failures``) and scrubbed of secrets, chained
causes included; the provider's client (``_openai``, ``_anthropic``) says what
its headers are and how its bodies read.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import time
from typing import TYPE_CHECKING, Any, ClassVar, Self

import anyio.lowlevel
import httpx
from httpx_sse import ServerSentEvent, aconnect_sse

from .._errors import ConfigurationError, Fatal, Recoverable
from .._log import get_logger
from .._redact import scrub, scrub_exception
from ._credentials import api_key as checked_key
from ._credentials import register_http_client, shown_url
from ._failures import for_request, for_status, for_transport, server_message

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Mapping
    from types import TracebackType

    from anyio.lowlevel import EventLoopToken

__all__ = ["ClientState", "HTTPModelClient"]

_logger = get_logger("arkhon_rheo.models")


class ClientState(enum.Enum):
    """Where a client is in its life."""

    #: Made, not entered: calls are refused until ``async with client``.
    UNOPENED = "unopened"
    #: Inside an ``async with`` (or given an ``httpx.AsyncClient`` it does not own).
    OPEN = "open"
    #: Every ``async with`` it was in has been left; entering it again reopens it.
    CLOSED = "closed"


class _Opened:
    """A client's opens in one event loop: the ``httpx.AsyncClient`` they share, and their count."""

    __slots__ = ("count", "http")

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.count = 0


class HTTPModelClient(abc.ABC):
    """The life and the sending of a model client over HTTP (a base for the providers').

    Args:
        model: The model to ask.
        api_key: The API key (checked, stripped and registered as a secret).
        key_source: Where the key came from, for errors (``"OPENAI_API_KEY"``).
        root: The server's root or API root, as configured (may hold a password).
        path: The endpoint's path under ``root`` (``"/chat/completions"``).
        http_client: An ``httpx.AsyncClient`` to send with; its owner closes it.
        connect_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for each read (between streamed events too).
        limiter: Bounds the calls in flight through this client.
        options: Further body fields sent with every request.

    Opens are counted, per event loop: the first ``async with`` in a loop makes
    the ``httpx.AsyncClient`` that loop's calls share (unless one was given),
    and the last one left in it closes it. So one client (a module-level
    `react_agent`'s) serves any number of agent systems, one after another or
    at once, on asyncio and trio alike, and is open while any of them is.

    Raises:
        ConfigurationError: A timeout is not a positive number, or a key or a
            credential header of ``http_client`` cannot be sent as it is.
    """

    #: The provider, as OpenTelemetry's GenAI conventions name it (``gen_ai.system``).
    system: ClassVar[str] = ""
    #: Where a 401's message sends the user to check the key.
    _KEY_HINT: ClassVar[str] = ""
    #: Where a 404's message sends the user to check the base URL.
    _URL_HINT: ClassVar[str] = ""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        key_source: str,
        root: str,
        path: str,
        http_client: httpx.AsyncClient | None,
        connect_timeout: float,
        read_timeout: float,
        limiter: anyio.CapacityLimiter | None,
        options: Mapping[str, Any] | None,
    ) -> None:
        self.model = model
        root = root.rstrip("/")
        #: The server's root, as it may be shown (a password in it masked).
        self.base_url = shown_url(root)
        self._api_key = checked_key(api_key, key_source)
        if http_client is not None:
            register_http_client(http_client, client=type(self).__name__)
        for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigurationError(
                    f"{name} must be a positive number of seconds, got {value!r}"
                )
        self.timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self.limiter = limiter
        self.options = dict(options or {})
        #: The endpoint, as it may be shown; requests go to the real one.
        self.url = f"{self.base_url}{path}"
        self._url = f"{root}{path}"
        self._given = http_client
        self._loops: dict[EventLoopToken, _Opened] = {}
        self._left = False  # every open has been left (and there was one)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key=<{key}>, state={self.state.value})"
        )

    @property
    def state(self) -> ClientState:
        """Where the client is in its life (open while any event loop has it open)."""
        if self._loops:
            return ClientState.OPEN
        if self._left:
            return ClientState.CLOSED
        return ClientState.UNOPENED if self._given is None else ClientState.OPEN

    @property
    def is_open(self) -> bool:
        """Whether calls may be made now: inside an ``async with``, or given an ``http_client``."""
        return self.state is ClientState.OPEN

    @property
    def counts_opens(self) -> bool:
        """Always true: each ``async with`` is counted, so every agent system enters it.

        An `AgentSystem` whose machine declares this client as a resource (as
        `react_agent` does) enters it even when it is open already (by its
        user, or by another system) and leaves it when it stops: the client
        stays open until the last of them has left it.
        """
        return True

    async def __aenter__(self) -> Self:
        loop = anyio.lowlevel.current_token()
        opened = self._loops.get(loop)
        if opened is None:
            http = self._given
            if http is None:
                http = httpx.AsyncClient(timeout=self.timeout)
            opened = self._loops[loop] = _Opened(http)
        opened.count += 1
        self._left = False
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        loop = anyio.lowlevel.current_token()
        opened = self._loops.get(loop)
        if opened is None:  # left more often than entered: nothing is open here
            return
        opened.count -= 1
        if opened.count > 0:
            return
        del self._loops[loop]  # an open from now on makes a new one
        self._left = not self._loops
        if self._given is None:
            await opened.http.aclose()

    @abc.abstractmethod
    def _headers(self) -> dict[str, str]:
        """The headers of every request, the key's included (never recorded)."""

    async def _post(self, body: dict[str, Any]) -> httpx.Response:
        """Send ``body`` for one reply; the response, its status a success.

        Raises:
            Transient: Rate limited, a 5xx, a timeout, or a refused or dropped connection.
            Fatal: The server refused the request, or the client is not open.
        """
        http = self._open_http()
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
        return response

    async def _events(self, body: dict[str, Any]) -> AsyncGenerator[ServerSentEvent]:
        """Send ``body`` and yield the server-sent events of its reply, to the end of the body.

        Events with no data (a lone ``retry:`` or ``id:``) are skipped.

        Raises:
            Transient: As `_post`.
            Fatal: As `_post`.
            Recoverable: The reply is not an event stream (a proxy's page...).
        """
        http = self._open_http()
        failure: Exception | None = None
        async with self._slot():
            try:
                async with aconnect_sse(
                    http, "POST", self._url, json=body, headers=self._headers(),
                    timeout=self.timeout,
                ) as source:  # fmt: skip
                    response = source.response
                    if response.status_code >= 400:
                        await response.aread()
                        raise self._status_failure(response)
                    kind = response.headers.get("content-type", "").partition(";")[0]
                    kind = kind.strip().lower()
                    if kind != "text/event-stream":
                        await response.aread()
                        raise self._not_a_stream(kind, response.text)
                    async with contextlib.aclosing(source.aiter_sse()) as events:
                        async for event in events:
                            if event.data:
                                yield event
            except Exception as exc:
                failure = self._request_failure(exc)
        if failure is not None:
            raise failure  # out of the except clause: no unscrubbed __context__

    def _not_a_stream(self, kind: str, text: str) -> Recoverable:
        return Recoverable(
            f"model {self.model!r} at {self.url}: a stream was asked for but the reply is "
            f"{kind or 'untyped'}, not text/event-stream ({server_message(text)[:80]!r}); "
            "check that the base URL points at the provider's API"
        )

    def _open_http(self) -> httpx.AsyncClient:
        opened = self._loops.get(anyio.lowlevel.current_token()) if self._loops else None
        if opened is not None:
            return opened.http
        if self._given is not None and not self._left:
            return self._given  # its owner's: usable wherever they use it
        if self._loops:
            raise Fatal(
                f"the {type(self).__name__} is open in another event loop only: enter it "
                "in this one too (`async with client:`) to call it here"
            )
        raise Fatal(
            f"the model client is {self.state.value}: use it inside "
            f"`async with {type(self).__name__}(...) as client:`"
        )

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self.limiter if self.limiter is not None else contextlib.nullcontext()

    def _status_failure(self, response: httpx.Response) -> Exception:
        failure = for_status(
            response.status_code,
            response.text,
            response.headers.get("retry-after"),
            model=self.model,
            url=self.url,
            now=time.time(),
            key_hint=self._KEY_HINT,
            url_hint=self._URL_HINT,
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
