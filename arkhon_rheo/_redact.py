"""Secret redaction for log lines: a structlog processor and the scrubbing behind it.

The library never configures logging; add `redact_secrets` to your processor
chain, after ``format_exc_info`` and before the renderer, and no API key
reaches a log line::

    structlog.configure(processors=[..., structlog.processors.format_exc_info,
                                    arkhon_rheo.redact_secrets, renderer])

It masks the values of keys that name a credential (``api_key``,
``authorization``, ``token``, ``secret``, ``password``...), ``Bearer ...``
credentials and ``sk-...``-style keys anywhere in text, and every secret a
client registered (the model clients register their API key), wherever it
appears. This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import MutableMapping

__all__ = ["REDACTED", "redact_secrets", "register_secret", "scrub"]

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


def register_secret(value: str | None) -> None:
    """Have `scrub` (and `redact_secrets`) mask ``value`` wherever it appears.

    Values shorter than four characters are ignored: masking them would mangle
    ordinary text, and no real key is that short.
    """
    if value and len(value) >= _MIN_SECRET:
        _SECRETS.add(value)


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential (``api_key``, ``Authorization``...)."""
    lowered = key.lower()
    if "api_key" in lowered or "api-key" in lowered or "apikey" in lowered:
        return True
    return any(part in _SECRET_WORDS for part in _KEY_SPLIT.split(lowered))


def scrub(text: str) -> str:
    """``text`` with registered secrets, bearer credentials and ``sk-`` keys masked."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(_mask, text)
    return text


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
