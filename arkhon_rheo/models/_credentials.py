"""The secrets a model client is given, checked and registered for scrubbing.

However a secret reaches the client (the ``api_key`` argument or
``OPENAI_API_KEY``, a password in the base URL, a credential in the headers,
query parameters or basic auth of an ``http_client``), it is registered with
``_redact`` here, so it is masked in everything the library raises, records,
stores, logs and traces. A key that no HTTP header can carry is refused when
the client is made, in an error that does not show it.
"""

from __future__ import annotations

import base64
import urllib.parse
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from .._redact import REDACTED, is_secret_key, register_secret

if TYPE_CHECKING:
    import httpx

__all__ = ["api_key", "register_http_client", "shown_url"]

_SCHEMES = ("bearer ", "basic ", "token ")
#: A URL's lone user part this long is taken for a token (shorter, for a name).
_TOKEN = 16


def _flaw(value: str, *, spaces: bool) -> str | None:
    """What in ``value`` cannot be sent in a header (without the value), or ``None``."""
    for index, char in enumerate(value):
        code = ord(char)
        if code > 0x7E:
            kind = "a non-ASCII character"
        elif code < 0x20 or code == 0x7F:
            kind = "a control character (a newline, a tab, a NUL...)"
        elif code == 0x20 and not spaces:
            kind = "a space"
        else:
            continue
        return f"{kind} at position {index + 1} of {len(value)}"
    return None


def api_key(value: str | None, source: str) -> str | None:
    """The API key to send, its surrounding whitespace stripped and registered as a secret.

    Args:
        value: The key as given (``None`` or ``""``: no key is sent).
        source: Where it came from, for the error (``"the api_key argument"``).

    Raises:
        ConfigurationError: The key is blank, or holds a character an HTTP
            header cannot carry (non-ASCII, a control character, an inner space).
    """
    if not value:
        return None
    key = value.strip()  # a key read from a file keeps its newline
    register_secret(key)
    if not key:
        raise ConfigurationError(
            f"the API key in {source} is blank (only whitespace); set the key itself, "
            "or leave it unset to send none"
        )
    flaw = _flaw(key, spaces=False)
    if flaw is not None:
        raise ConfigurationError(
            f"the API key in {source} has {flaw}, which an HTTP header cannot carry; "
            "copy the key again (an API key is printable ASCII, without spaces)"
        )
    return key


def shown_url(url: str) -> str:
    """``url`` as it may be shown: its credentials masked, and registered as secrets.

    ``http://user:pass@host/v1`` shows as ``http://user:[REDACTED]@host/v1``; a
    lone user part (``https://token@host``) is masked whole, and registered if
    it is long enough to be a token rather than a name (`_TOKEN` characters). A
    query parameter named like a credential (``?api-key=...``) is masked and
    registered too.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.query:
        parts = parts._replace(query=_shown_query(parts.query))
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return urllib.parse.urlunsplit(parts)
    user, colon, password = userinfo.partition(":")
    secret = password if colon else user
    if colon or len(secret) >= _TOKEN:
        for form in {secret, urllib.parse.unquote(secret)}:
            register_secret(form)
    plain = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    register_secret(base64.b64encode(plain.encode()).decode())  # as a Basic header sends it
    shown = f"{user}:{REDACTED}" if colon else REDACTED
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{shown}@{host}"))


def _shown_query(query: str) -> str:
    """``query`` with the values of parameters named like a credential masked (and registered)."""
    shown = []
    for item in query.split("&"):
        name, equals, value = item.partition("=")
        if equals and value and is_secret_key(urllib.parse.unquote_plus(name)):
            for form in {value, urllib.parse.unquote_plus(value)}:
                register_secret(form)
            item = f"{name}={REDACTED}"
        shown.append(item)
    return "&".join(shown)


def register_http_client(http: httpx.AsyncClient, *, client: str = "OpenAIChatClient") -> None:
    """Register the credentials an ``httpx.AsyncClient`` sends with every request.

    Its headers and query parameters named like a credential (``Authorization``,
    ``api-key``, ``X-API-Key``, ``Cookie``...), with and without their scheme
    (``Bearer ...``), and its basic auth. ``client`` names the model client
    it was given to, for the error.

    Raises:
        ConfigurationError: A credential header holds a character a header
            cannot carry (the value is not shown).
    """
    for name, value in http.headers.multi_items():
        if not is_secret_key(name):
            continue
        register_secret(value)
        lowered = value.lower()
        for scheme in _SCHEMES:
            if lowered.startswith(scheme):
                register_secret(value[len(scheme) :].strip())
        flaw = "surrounding whitespace" if value != value.strip() else _flaw(value, spaces=True)
        if flaw is not None:
            raise ConfigurationError(
                f"the {_header_name(http, name)} header of the http_client given to "
                f"{client} has {flaw}, which an HTTP header cannot carry; "
                "strip the value (a key read from a file keeps its newline)"
            )
    for name, value in http.params.multi_items():
        if is_secret_key(name):
            register_secret(value)
    header = getattr(http.auth, "_auth_header", None)  # httpx.BasicAuth's, ready-made
    if isinstance(header, str):
        register_secret(header)
        register_secret(header.partition(" ")[2])


def _header_name(http: httpx.AsyncClient, lowered: str) -> str:
    """A header's name as the user wrote it."""
    for raw, _ in http.headers.raw:
        name = raw.decode("latin-1")
        if name.lower() == lowered:
            return name
    return lowered
