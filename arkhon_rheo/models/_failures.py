"""How an HTTP failure of a model server is classified: retry, restart, or fail.

::

    429 Too Many Requests, 408, 5xx      Transient   (honouring Retry-After)
    529 Overloaded (Anthropic)           Transient   (honouring Retry-After)
    timeouts, refused or dropped links   Transient
    400, 401, 403, 404, 413, 422, 4xx    Fatal       (the message says what to fix)
    a request that cannot be sent        Fatal       (a header httpx refuses, a UnicodeError)
    a body that is not the format        Recoverable (see ``_wire``)

Messages carry the server's own error message, scrubbed of secrets and then
cut to length (a secret cut in two would no longer be found), never a header;
the API key cannot reach them.
"""

from __future__ import annotations

import email.utils
import json
import math

import httpx

from .._errors import Fatal, StageFailure, Transient
from .._redact import scrub

__all__ = [
    "for_request",
    "for_status",
    "for_stream_error",
    "for_transport",
    "retry_after_seconds",
    "server_message",
]

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_MAX_MESSAGE = 500
#: The error types of a stream's error event that a retry cannot fix.
_FATAL_KINDS = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
    }
)


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` header as seconds from ``now`` (a Unix time), or ``None``.

    Both forms are understood: delay-seconds (``"7"``, ``"1.5"``) and an HTTP
    date (``"Wed, 21 Oct 2015 07:28:00 GMT"``); a date in the past is 0.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def server_message(text: str) -> str:
    """The error message in a server's error body (OpenAI's shape or plain text), scrubbed."""
    message = text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        pass
    else:
        error = data.get("error", data.get("detail", data)) if isinstance(data, dict) else data
        if isinstance(error, dict):
            error = error.get("message", error)
        message = error if isinstance(error, str) else json.dumps(error)
    message = scrub(message)
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "..."
    return message or "(empty body)"


def for_status(
    status: int,
    body: str,
    retry_after: str | None,
    *,
    model: str,
    url: str,
    now: float,
    key_hint: str = "OPENAI_API_KEY",
    url_hint: str = "OPENAI_BASE_URL, usually ending in /v1",
) -> StageFailure:
    """The classified error for a response with an error ``status``.

    ``key_hint`` and ``url_hint`` name where the key and the base URL come
    from, for the messages of a 401 and a 404 (each provider's own variables).
    """
    said = server_message(body)
    where = f"model {model!r} at {url}"
    if status in _TRANSIENT_STATUS or status >= 500:
        wait = retry_after_seconds(retry_after, now)
        hint = f"; the server asks to retry after {wait:g} s" if wait is not None else ""
        reasons = {429: "rate limited", 529: "overloaded"}
        reason = reasons.get(status, "temporarily unavailable")
        return Transient(f"{where}: {reason} (HTTP {status}: {said}){hint}", retry_after=wait)
    if status == 401:
        return Fatal(
            f"{where} refused the API key (HTTP 401: {said}); check {key_hint}, "
            "or the api_key argument of the client"
        )
    if status == 403:
        return Fatal(
            f"{where} forbids this request (HTTP 403: {said}); check that the API key "
            "may use this model (its project, organisation or region)"
        )
    if status == 404:
        return Fatal(
            f"{where} was not found (HTTP 404: {said}); check the model name (ARKHON_MODEL "
            f"or the model argument) and the base URL ({url_hint})"
        )
    if status == 413:
        return Fatal(
            f"{where}: the request is too large (HTTP 413: {said}); shorten the conversation "
            "(react_agent's max_context_tokens), the tool results or the tool schemas"
        )
    return Fatal(
        f"{where} refused the request (HTTP {status}: {said}); fix what the server names "
        "(a message, tool schema or option it does not accept)"
    )


def for_stream_error(data: object, *, model: str, url: str) -> StageFailure:
    """The error for an ``error`` event in a stream (the server failed mid-reply).

    ``data`` is the event's JSON (``{"error": {"type": ..., "message": ...}}``,
    Anthropic's and OpenAI's shape) or its text. A request the server refuses
    (invalid, unauthenticated, forbidden, unknown, too large) is `Fatal`;
    anything else (overloaded, rate limited, an API error) is `Transient`.
    """
    error = data.get("error", data) if isinstance(data, dict) else data
    kind = str(error.get("type") or "error") if isinstance(error, dict) else "error"
    said = server_message(data if isinstance(data, str) else json.dumps(data))
    where = f"model {model!r} at {url}"
    if kind in _FATAL_KINDS:
        return Fatal(
            f"{where}: the server refused the request mid-stream ({kind}: {said}); "
            "fix what it names (the API key, the model name, the request's size or fields)"
        )
    return Transient(f"{where}: the server failed mid-stream ({kind}: {said})")


def for_transport(
    exc: httpx.TransportError, *, model: str, url: str, timeouts: str
) -> StageFailure:
    """The error for a failed exchange: a timeout, a refused or dropped connection (transient).

    A request httpx refuses to send (a header value no header may carry) is
    `Fatal`: sent again, it fails again.
    """
    where = f"model {model!r} at {url}"
    if isinstance(exc, httpx.LocalProtocolError):
        return Fatal(
            f"{where}: the request could not be sent ({type(exc).__name__}: "
            f"{scrub(str(exc)) or 'no detail'}); a header holds a character HTTP does not "
            "allow: check the API key and the headers of the http_client"
        )
    if isinstance(exc, httpx.TimeoutException):
        kind = type(exc).__name__
        return Transient(
            f"{where} timed out ({kind}, {timeouts}); retried by the supervisor's backoff. "
            "Raise the client's timeouts if the model is slow to answer"
        )
    if isinstance(exc, httpx.ConnectError):
        return Transient(f"{where} could not be reached ({scrub(str(exc)) or 'connect failed'})")
    return Transient(
        f"{where}: the connection failed mid-exchange ({type(exc).__name__}: "
        f"{scrub(str(exc)) or 'no detail'})"
    )


def for_request(exc: Exception, *, model: str, url: str) -> Fatal:
    """The error for a request that raised something else it cannot get past.

    A `UnicodeError` (a header or the URL that HTTP cannot carry), or an error
    whose secret could not be scrubbed from it in place.
    """
    hint = (
        "; a header or the URL holds a character HTTP cannot carry: check the API key, "
        "the base URL and the headers of the http_client"
        if isinstance(exc, UnicodeError)
        else ""
    )
    return Fatal(
        f"model {model!r} at {url}: the request could not be made ({type(exc).__name__}: "
        f"{scrub(str(exc)) or 'no detail'}){hint}"
    )
