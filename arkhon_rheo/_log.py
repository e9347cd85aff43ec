"""The library's loggers: never into the user's output unless the user asks.

A library must not print into its user's stdout. Where a log line goes depends
on the application:

- If the application has configured structlog (``structlog.configure(...)``),
  the library's events go through that configuration, like the application's
  own (``structlog.testing.capture_logs`` sees them too).
- Otherwise they end as `logging` records on a logger under ``arkhon_rheo``
  (``arkhon_rheo.actors``, ``arkhon_rheo.supervision``, ...). The
  ``arkhon_rheo`` logger has a `logging.NullHandler`, so until the application
  configures `logging` nothing is shown; ``logging.basicConfig()`` shows them,
  and a handler with `structlog.stdlib.ProcessorFormatter` renders every field
  as JSON or console output (the event dict travels as the record's ``msg``).

Either way, secrets are redacted before an event leaves the library
(`redact_secrets`), and a broken log pipeline never breaks the runtime.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import structlog

__all__ = ["LibraryLogger", "add_secret", "get_logger", "redact_secrets"]

_ROOT = "arkhon_rheo"
logging.getLogger(_ROOT).addHandler(logging.NullHandler())

_SECRET_KEY = re.compile(r"(api[_-]?key|authorization|token|secret|password|passwd)", re.I)
_SECRET_VALUE = re.compile(
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}"  # an Authorization header's credentials
    r"|\bsk-[A-Za-z0-9_-]{8,}"  # OpenAI-style keys
)
REDACTED = "[redacted]"
_extra_secrets: set[str] = set()


def add_secret(value: str) -> None:
    """Redact ``value`` wherever it appears in a library log line from now on.

    A client that holds a key registers it, so even a key of no known shape
    never reaches a log.
    """
    if len(value) >= 4:
        _extra_secrets.add(value)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        value = _SECRET_VALUE.sub(REDACTED, value)
        for secret in _extra_secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {
            key: REDACTED if isinstance(key, str) and _SECRET_KEY.search(key) else _scrub(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_scrub(item) for item in value)
    return value


def redact_secrets(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """A structlog processor: blank out keys, bearer tokens and ``sk-...`` values.

    A field whose name looks like a secret (``api_key``, ``authorization``,
    ``token``, ``secret``, ``password``) is replaced whole; in every other string
    (nested in dicts, lists and tuples too), ``Bearer <credentials>``,
    ``sk-...`` keys and the values registered with `add_secret` are replaced.
    """
    scrubbed: dict[str, Any] = _scrub(event_dict)
    return scrubbed


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    redact_secrets,
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
]


class LibraryLogger:
    """A logger of the library: ``logger.warning("event", field=value)``, never raising."""

    __slots__ = ("_configured", "_stdlib")

    def __init__(self, name: str) -> None:
        self._stdlib: Any = structlog.wrap_logger(
            logging.getLogger(name),
            processors=_PROCESSORS,
            wrapper_class=structlog.stdlib.BoundLogger,
        )
        self._configured: Any = structlog.get_logger(name)

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        try:
            fields = _scrub(fields)
            target = self._configured if structlog.is_configured() else self._stdlib
            getattr(target, level)(_scrub(event), **fields)
        except Exception:  # a broken log pipeline must not break the runtime
            pass

    def debug(self, event: str, **fields: Any) -> None:
        """Log ``event`` at debug level."""
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log ``event`` at info level."""
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log ``event`` at warning level."""
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log ``event`` at error level."""
        self._emit("error", event, fields)


def get_logger(name: str) -> LibraryLogger:
    """The logger of the library module ``name`` (``arkhon_rheo.<part>``)."""
    return LibraryLogger(name)
