"""What a `RateGovernor` limits by: `RateLimit`, and the priority calls wait with."""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass

from .._errors import ConfigurationError

__all__ = ["DEFAULT_PRIORITY", "RateLimit", "checked_priority", "current_priority", "rate_priority"]

#: The priority of a call that names none (a session with its whole budget left).
DEFAULT_PRIORITY = 1.0

_PRIORITY: contextvars.ContextVar[float] = contextvars.ContextVar(
    "arkhon_rheo_rate_priority", default=DEFAULT_PRIORITY
)


def current_priority() -> float:
    """The priority the calls made in this context wait with (see `rate_priority`)."""
    return _PRIORITY.get()


class rate_priority:
    """Make ``priority`` the one this context's governed calls wait with.

    The ReAct engine sets it around each model call to the fraction of the
    session's budget left (1.0 without a budget), so that sessions with the
    most left are served first.
    """

    __slots__ = ("_priority", "_token")

    def __init__(self, priority: float) -> None:
        self._priority = checked_priority(priority)
        self._token: contextvars.Token[float] | None = None

    def __enter__(self) -> None:
        self._token = _PRIORITY.set(self._priority)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _PRIORITY.reset(self._token)


def checked_priority(priority: float) -> float:
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise ConfigurationError(f"a rate priority must be a number, got {priority!r}")
    if not math.isfinite(priority):
        raise ConfigurationError(f"a rate priority must be a finite number, got {priority!r}")
    return float(priority)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """What a model key may be sent: requests and tokens per minute; ``None`` for no limit.

    The limits are counted over a sliding ``window`` of seconds (a minute by
    default): ``RateLimit(requests_per_minute=600, window=10)`` allows 100
    requests in any 10 s, which a server counting over 10 s windows needs.

    Attributes:
        requests_per_minute: Requests a minute.
        tokens_per_minute: Prompt and completion tokens a minute.
        window: The sliding window, in seconds, the limits are counted over.

    Raises:
        ConfigurationError: A limit or the window is not a positive number, or
            the window is too short to allow one request.
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    window: float = 60.0

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute", "window"):
            value = getattr(self, name)
            if value is None and name != "window":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigurationError(
                    f"RateLimit({name}={value!r}): give a positive number"
                    + (" of seconds" if name == "window" else ", or None for no limit")
                )
        requests = self.requests
        if requests is not None and requests < 1:
            raise ConfigurationError(
                f"RateLimit(requests_per_minute={self.requests_per_minute!r}, "
                f"window={self.window!r}) allows less than one request per window; "
                "lengthen the window"
            )

    @property
    def requests(self) -> int | None:
        """Requests allowed in one window."""
        rpm = self.requests_per_minute
        return None if rpm is None else math.floor(rpm * self.window / 60.0 + 1e-9)

    @property
    def tokens(self) -> int | None:
        """Tokens allowed in one window."""
        tpm = self.tokens_per_minute
        return None if tpm is None else max(1, math.floor(tpm * self.window / 60.0 + 1e-9))
