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

`configure_logging` is the short way for an application to see them: it gives
the ``arkhon_rheo`` logger a handler that renders each event as a console line
or a JSON object. The library never calls it itself.

Events of the hot path (a commit) are built only when their level is enabled:
`LibraryLogger.is_enabled` asks the configured structlog wrapper, or the
`logging` logger, before any field is put together.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import TYPE_CHECKING, Any, Literal

from ._errors import ConfigurationError
from ._redact import redact_secrets

if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["LibraryLogger", "configure_logging", "get_logger"]

_ROOT = "arkhon_rheo"
logging.getLogger(_ROOT).addHandler(logging.NullHandler())


@functools.cache
def _processors() -> list[Any]:
    """The chain of a library logger when structlog is not configured (imported on first use)."""
    import structlog

    return [
        structlog.stdlib.filter_by_level,
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        redact_secrets,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ]


def _configured_structlog() -> Any:
    """structlog, if the application configured it; None otherwise.

    An application that called ``structlog.configure`` imported structlog: one
    that did not have it in `sys.modules` has not configured it, and the library
    does not import it (with rich) before a log line is written.
    """
    module = sys.modules.get("structlog")
    if module is None or not module.is_configured():
        return None
    return module


#: The least level each structlog wrapper class lets through (`_ASK_LOGGING`: its
#: `logging` logger decides); filled on first use of each class.
_least_levels: dict[Any, int] = {}
_ASK_LOGGING = -1


def _least_level(wrapper: Any) -> int:
    import structlog

    try:
        if isinstance(wrapper, type) and issubclass(wrapper, structlog.stdlib.BoundLogger):
            return _ASK_LOGGING
        # make_filtering_bound_logger's classes answer without an instance.
        return int(wrapper.get_effective_level(None))
    except Exception:  # a wrapper of unknown kind: let it see everything
        return logging.NOTSET


class LibraryLogger:
    """A logger of the library: ``logger.warning("event", field=value)``, never raising."""

    __slots__ = ("_configured", "_logger", "_stdlib")

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)
        # structlog's loggers, made when the first line is written.
        self._stdlib: Any = None
        self._configured: Any = None

    def _target(self) -> Any:
        """The structlog logger a line goes through: the application's, else the library's."""
        import structlog

        if structlog.is_configured():
            if self._configured is None:
                self._configured = structlog.get_logger(self._logger.name)
            return self._configured
        if self._stdlib is None:
            self._stdlib = structlog.wrap_logger(
                self._logger,
                processors=_processors(),
                wrapper_class=structlog.stdlib.BoundLogger,
            )
        return self._stdlib

    def is_enabled(self, level: int) -> bool:
        """Whether an event at ``level`` (``logging.INFO``...) would be logged at all.

        Cheap enough for a hot path: call it before building an event's fields.
        When it cannot tell (a structlog wrapper it does not know), it says yes.
        """
        structlog = _configured_structlog()
        if structlog is None:
            return self._logger.isEnabledFor(level)
        wrapper = structlog.get_config()["wrapper_class"]
        least = _least_levels.get(wrapper)
        if least is None:
            least = _least_levels[wrapper] = _least_level(wrapper)
        return self._logger.isEnabledFor(level) if least == _ASK_LOGGING else level >= least

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        try:
            fields = dict(redact_secrets(None, level, {"event": event, **fields}))
            event = fields.pop("event")
            getattr(self._target(), level)(event, **fields)
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


#: Marks the handler `configure_logging` installed, so a second call replaces it.
_HANDLER_MARK = "_arkhon_rheo_configured"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
_LEVELS |= {"error": logging.ERROR, "critical": logging.CRITICAL}


def configure_logging(
    format: Literal["console", "json"] = "console",
    level: int | str = "info",
    *,
    stream: TextIO | None = None,
) -> None:
    """Show the library's log events: one console line or one JSON object per event.

    Call it once at start-up (the library never does). It gives the
    ``arkhon_rheo`` logger a handler on ``stream`` that renders every field of
    each event (``session_id`` and ``stage`` come from contextvars), with a
    timestamp, secrets redacted, and sets that logger's level. Calling it again
    replaces the handler. Events stop propagating to the root logger, so an
    application that also configured `logging` does not see them twice.

    If the application configured structlog itself (``structlog.configure``),
    the library's events go through that configuration instead, and this
    handler stays silent: configure one or the other.

    Args:
        format: ``"console"`` (aligned ``key=value`` lines) or ``"json"``.
        level: The lowest level shown: a `logging` level or its name
            (``"debug"``, ``"info"``, ``"warning"``, ``"error"``).
        stream: Where lines go; standard error by default.

    Raises:
        ConfigurationError: If ``format`` or ``level`` is not one of these.
    """
    import structlog

    if format == "json":
        renderer: Any = structlog.processors.JSONRenderer(default=repr)
    elif format == "console":
        out = sys.stderr if stream is None else stream
        colors = bool(getattr(out, "isatty", lambda: False)())
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    else:
        raise ConfigurationError(
            f"configure_logging(format=...) takes 'console' or 'json', got {format!r}"
        )
    if isinstance(level, str) and level.lower() in _LEVELS:
        levelno = _LEVELS[level.lower()]
    elif isinstance(level, int) and not isinstance(level, bool) and level >= 0:
        levelno = level
    else:
        raise ConfigurationError(
            f"configure_logging(level=...) takes a logging level or one of "
            f"{', '.join(map(repr, _LEVELS))}; got {level!r}"
        )
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                redact_secrets,
                renderer,
            ],
            foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name],
        )
    )
    setattr(handler, _HANDLER_MARK, True)
    library = logging.getLogger(_ROOT)
    _remove_handlers(library)
    library.addHandler(handler)
    library.setLevel(levelno)
    library.propagate = False


def _remove_handlers(library: logging.Logger) -> None:
    for old in [h for h in library.handlers if getattr(h, _HANDLER_MARK, False)]:
        library.removeHandler(old)
        old.close()


def unconfigure_logging() -> None:
    """Undo `configure_logging` (for tests): no handler, level unset, propagation back on."""
    library = logging.getLogger(_ROOT)
    _remove_handlers(library)
    library.setLevel(logging.NOTSET)
    library.propagate = True
