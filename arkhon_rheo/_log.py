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
(`arkhon_rheo.redact_secrets`), and a broken log pipeline never breaks the runtime.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

from ._redact import redact_secrets

__all__ = ["LibraryLogger", "get_logger"]

_ROOT = "arkhon_rheo"
logging.getLogger(_ROOT).addHandler(logging.NullHandler())

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
            fields = dict(redact_secrets(None, level, {"event": event, **fields}))
            event = fields.pop("event")
            target = self._configured if structlog.is_configured() else self._stdlib
            getattr(target, level)(event, **fields)
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
