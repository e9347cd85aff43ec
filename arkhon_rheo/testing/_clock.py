"""`VirtualClock`: a clock for tests that moves only when told to."""

from __future__ import annotations

import math
import time

import anyio

from .._errors import ConfigurationError

__all__ = ["VirtualClock"]


class VirtualClock:
    """A `Clock` whose time moves only by `advance` (or `set`): timers without waiting.

    Pass it to ``AgentSystem(clock=...)``: messages and timers are stamped
    with its time, and the system's timer watch sleeps on it, so a timer due in
    two hours fires as soon as a test advances the clock past it, on either
    backend, with no wall-clock wait.

    Args:
        start: Its time at first, in seconds since the epoch (default: now, by
            the machine's clock, so that it can stand in for a clock that
            stored timers before a restart).
    """

    __slots__ = ("_changed", "_now")

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else _finite("start", start)
        self._changed: anyio.Event | None = None

    def now(self) -> float:
        """Its time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move its time on by ``seconds``, waking whoever sleeps until then.

        Raises:
            ConfigurationError: If ``seconds`` is negative or not a finite number.
        """
        seconds = _finite("seconds", seconds)
        if seconds < 0:
            raise ConfigurationError(f"a clock moves forward only: advance({seconds!r})")
        self.set(self._now + seconds)

    def set(self, now: float) -> None:
        """Set its time to ``now`` (not earlier than it is), waking whoever sleeps until then.

        Raises:
            ConfigurationError: If ``now`` is earlier than its time, or not finite.
        """
        now = _finite("now", now)
        if now < self._now:
            raise ConfigurationError(f"a clock moves forward only: {now!r} < {self._now!r}")
        self._now = now
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def sleep_until(self, deadline: float) -> None:
        """Return once its time is ``deadline`` or later."""
        while self._now < deadline:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def __repr__(self) -> str:
        return f"VirtualClock({self._now!r})"


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"VirtualClock {name} must be a finite number, got {value!r}")
    return float(value)
