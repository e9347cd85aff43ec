"""Secret redaction: a structlog processor, and the scrubbing behind it and everything else.

The library never configures logging; add `redact_secrets` to your processor
chain, after ``format_exc_info`` and before the renderer, and no API key
reaches a log line::

    structlog.configure(processors=[..., structlog.processors.format_exc_info,
                                    arkhon_rheo.redact_secrets, renderer])

It masks the values of keys that name a credential (``api_key``,
``authorization``, ``token``, ``secret``, ``password``...), ``Bearer ...``
credentials and ``sk-...``-style keys anywhere in text, and every secret a
client registered (the model clients register their API key, a password in
their base URL and the credentials in an ``http_client``'s headers), wherever
it appears. The sensitive values of the sessions running (the values of their
`Sensitive` state fields) are held the same way while they run
(`hold_secrets`, `release_secrets`).

The rest of the library scrubs with the same registry: `scrub` for text it
shows (a model client's error messages, span events); and, masking only the
registered secrets (what it keeps or hands back may say ``basic`` or
``Bearer`` in good faith), `scrub_secrets` and `scrub_data` for failure
records, replies and call records, `scrub_exception` for an exception and its
whole chain, and `StreamScrubber` for text that arrives in pieces.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, MutableMapping

__all__ = [
    "REDACTED",
    "ScrubbedError",
    "StreamScrubber",
    "hold_secrets",
    "redact_secrets",
    "register_secret",
    "release_secrets",
    "scrub",
    "scrub_data",
    "scrub_exception",
    "scrub_secrets",
]

REDACTED = "[REDACTED]"

_SECRET_WORDS = frozenset(
    {"apikey", "authorization", "auth", "token", "secret", "password", "passwd", "cookie"}
)
_KEY_SPLIT = re.compile(r"[^a-z0-9]+")
_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),
)
_SECRETS: set[str] = set()
_MIN_SECRET = 4  # shorter values would mask ordinary words
#: Registered secrets, longest first (a secret inside another is masked after it).
_ORDERED: list[str] = []


#: Values held for a while (a running session's sensitive values), with how many holds each.
_HELD: dict[str, int] = {}
_CHANGE = threading.Lock()


def _reorder() -> None:
    _ORDERED[:] = sorted(_SECRETS.union(_HELD), key=len, reverse=True)


def register_secret(value: str | None) -> None:
    """Have `scrub` (and `redact_secrets`) mask ``value`` wherever it appears.

    Values shorter than four characters are ignored: masking them would mangle
    ordinary text, and no real key is that short.
    """
    if value and len(value) >= _MIN_SECRET and value not in _SECRETS:
        with _CHANGE:
            _SECRETS.add(value)
            _reorder()


def hold_secrets(values: Iterable[str]) -> list[str]:
    """Mask ``values`` like registered secrets until `release_secrets` lets them go.

    For secrets that come and go (the sensitive values of the sessions running):
    holds are counted, so a value held twice stays masked until released twice.
    Values shorter than four characters are ignored, as by `register_secret`.

    Returns:
        The values held, to pass to `release_secrets`.
    """
    held = [value for value in values if isinstance(value, str) and len(value) >= _MIN_SECRET]
    if held:
        with _CHANGE:
            new = False
            for value in held:
                count = _HELD.get(value, 0)
                _HELD[value] = count + 1
                new = new or (count == 0 and value not in _SECRETS)
            if new:
                _reorder()
    return held


def release_secrets(values: Iterable[str]) -> None:
    """Let go of values `hold_secrets` held (each once per time it was held)."""
    with _CHANGE:
        gone = False
        for value in values:
            count = _HELD.get(value, 0)
            if count <= 1:
                gone = _HELD.pop(value, None) is not None or gone
            else:
                _HELD[value] = count - 1
        if gone:
            _reorder()


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential (``api_key``, ``Authorization``...)."""
    lowered = key.lower()
    if "api_key" in lowered or "api-key" in lowered or "apikey" in lowered:
        return True
    return any(part in _SECRET_WORDS for part in _KEY_SPLIT.split(lowered))


def scrub(text: str) -> str:
    """``text`` with registered secrets, bearer credentials and ``sk-`` keys masked."""
    text = scrub_secrets(text)
    for pattern in _PATTERNS:
        text = pattern.sub(_mask, text)
    return text


def scrub_secrets(text: str) -> str:
    """``text`` with the registered secrets masked (and nothing else: no pattern)."""
    for secret in _ORDERED:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_data(value: Any) -> Any:
    """JSON-like data with the registered secrets masked in every string, keys included.

    ``value`` itself is returned when nothing in it changed.
    """
    if not _ORDERED:
        return value
    if isinstance(value, str):
        return scrub_secrets(value)
    if isinstance(value, dict):
        items = {scrub_data(k): scrub_data(v) for k, v in value.items()}
        same = len(items) == len(value) and all(k in value and items[k] is value[k] for k in items)
        return value if same else items
    if isinstance(value, list | tuple):
        scrubbed = [scrub_data(item) for item in value]
        if all(new is old for new, old in zip(scrubbed, value, strict=True)):
            return value
        return scrubbed if isinstance(value, list) else tuple(scrubbed)
    return value


class ScrubbedError(Exception):
    """Stands in, in an exception's chain, for an error whose text held a secret.

    `scrub_exception` puts one in place of a link it cannot clean (an error whose
    message is not made from its ``args``); it carries the original's class name
    and scrubbed message, traceback and chain.
    """


def _shown(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder for an exception whose ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} that cannot be shown>"


def _dirty(exc: BaseException) -> bool:
    """Whether anything an exception shows still holds a registered secret."""
    if not _ORDERED:
        return False
    notes = getattr(exc, "__notes__", None)
    for shown in (_shown(exc), repr(exc.args), repr(notes) if notes else ""):
        if shown and scrub_secrets(shown) != shown:
            return True
    return False


def _scrub_in_place(exc: BaseException) -> None:
    """Scrub an exception's ``args``, notes and (a `UnicodeError`'s) ``object``."""
    try:
        args = scrub_data(exc.args)
        if args is not exc.args:
            exc.args = args
        notes = getattr(exc, "__notes__", None)
        if isinstance(notes, list):
            exc.__notes__ = scrub_data(notes)
        if isinstance(exc, UnicodeEncodeError | UnicodeTranslateError):
            exc.object = scrub_secrets(exc.object)
    except (AttributeError, TypeError, ValueError):  # an exception that refuses: a stand-in
        pass


def _stand_in(exc: BaseException) -> BaseException:
    cls = type(exc)
    stand_in = ScrubbedError(f"{cls.__module__}.{cls.__qualname__}: {scrub_secrets(_shown(exc))}")
    stand_in.__traceback__ = exc.__traceback__
    stand_in.__cause__ = exc.__cause__
    stand_in.__context__ = exc.__context__
    stand_in.__suppress_context__ = exc.__suppress_context__
    return stand_in


def scrub_exception(exc: BaseException) -> BaseException:
    """Scrub registered secrets from an exception and its whole chain, in place where it can.

    Every link (``__cause__``, ``__context__``, an exception group's members) has
    its ``args`` and notes scrubbed; a link that still shows a secret is replaced
    in the chain by a `ScrubbedError`.

    Returns:
        ``exc``, scrubbed, or a `ScrubbedError` standing in for it if it could
        not be cleaned in place (raise from that one).
    """
    if not _ORDERED:
        return exc
    links: list[BaseException] = []
    seen: set[int] = set()
    stack = [exc]
    while stack:  # every link, each once (a chain may loop back on itself)
        link = stack.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        links.append(link)
        _scrub_in_place(link)
        stack += [e for e in (link.__cause__, link.__context__) if e is not None]
        if isinstance(link, BaseExceptionGroup):
            stack += link.exceptions
    for link in reversed(links):  # the far end first: a stand-in copies a cleaned chain
        suppress = link.__suppress_context__
        for name in ("__cause__", "__context__"):
            linked = getattr(link, name)
            if linked is not None and _dirty(linked):
                setattr(link, name, _stand_in(linked))
        link.__suppress_context__ = suppress  # setting __cause__ sets it
    return _stand_in(exc) if _dirty(exc) else exc


class StreamScrubber:
    """Masks registered secrets in text that arrives in pieces (a streamed reply).

    `feed` returns what can be passed on of the text so far, with every secret
    masked, one split across pieces too. A piece that ends with four or more
    characters that begin a secret keeps them back until the next piece says
    whether the secret follows (so at most three characters of a secret, at the
    end of a piece, are passed on before it is recognised; the rest is masked);
    `flush` gives what is kept back at the end, masked.
    """

    __slots__ = ("_before", "_held")

    def __init__(self) -> None:
        self._held = ""  # kept back: it may begin a secret
        self._before = ""  # the end of what was passed on (a secret may have begun there)

    def feed(self, text: str) -> str:
        """Take the next piece; return the text that can be passed on now."""
        if not _ORDERED:
            return text
        before = self._before
        shown = _mask_after(before + self._held + text, len(before))
        begun = _partial_tail(before + shown)
        keep = min(begun, len(shown)) if begun >= _MIN_SECRET else 0
        passed, self._held = shown[: len(shown) - keep], shown[len(shown) - keep :]
        self._before = (before + passed)[-len(_ORDERED[0]) :]
        return passed

    def flush(self) -> str:
        """What is kept back, masked, once no piece follows."""
        held, self._held = self._held, ""
        return REDACTED if held else ""


def _mask_after(text: str, start: int) -> str:
    """``text[start:]`` with every registered secret that reaches into it masked."""
    spans: list[tuple[int, int]] = []
    for secret in _ORDERED:  # longest first: a secret inside another is part of it
        found = text.find(secret, max(0, start - len(secret) + 1))
        while found != -1:
            end = found + len(secret)
            if not any(found < e and s < end for s, e in spans):
                spans.append((found, end))
            found = text.find(secret, found + 1)
    pieces, cursor = [], start
    for begin, end in sorted(spans):
        pieces += [text[cursor : max(begin, start)], REDACTED]
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


def _partial_tail(text: str) -> int:
    """The length of the longest end of ``text`` that begins some registered secret."""
    longest = 0
    for secret in _ORDERED:
        start = max(0, len(text) - len(secret) + 1)  # a proper start: shorter than it
        found = text.find(secret[0], start)
        while found != -1 and len(text) - found > longest:
            if secret.startswith(text[found:]):
                longest = len(text) - found
                break
            found = text.find(secret[0], found + 1)
    return longest


def _mask(match: re.Match[str]) -> str:
    scheme = match.group(1) if match.re.groups else None
    return f"{scheme} {REDACTED}" if scheme else REDACTED


def _redact(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: REDACTED if _named_secret(k) else _redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact(item) for item in value)
    if isinstance(value, BaseException):
        shown = repr(value)
        cleaned = scrub(shown)
        return value if cleaned == shown else cleaned
    return value


def _named_secret(key: object) -> bool:
    return isinstance(key, str) and is_secret_key(key)


def redact_secrets(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor that masks secrets in an event dict (see the module docstring).

    Args:
        logger: The wrapped logger (unused).
        method_name: The log method's name (unused).
        event_dict: The event; its values are replaced, nested dicts and lists too.

    Returns:
        The event with credential-named keys' values and secret-looking text masked.
    """
    for key, value in list(event_dict.items()):
        event_dict[key] = REDACTED if _named_secret(key) and key != "event" else _redact(value)
    return event_dict
