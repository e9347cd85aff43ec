"""`RateGovernor`: requests- and tokens-per-minute limits per model key, shared by sessions.

One governor holds a *lane* per model key (``"openai|https://api.openai.com/v1|gpt-4o-mini"``
or a name the user gives). A call asks its lane for a slot before it is
sent and gives it back when its reply is in:

* a request counts against the lane's window from when it is sent until one
  window after its reply came back (so a server that counts arrivals never
  sees more than the limit, however late a request reaches it);
* its tokens are estimated when it is sent (prompt and the most the reply may
  use), and corrected from the reply's usage when it is back;
* a server that asks to wait (a `Transient` failure with ``retry_after``: a
  429 or 529 and its ``Retry-After``) closes the lane until then, for every
  session on it at once;
* callers that cannot go now wait in the lane's queue, served by priority
  (highest first, then the one that asked first); only the one at the head
  sleeps, on the governor's clock, until its slot frees: nothing polls.

Everything runs on anyio (asyncio or trio) and tells the time by a `Clock`
(``arkhon_rheo.testing.VirtualClock`` in tests). The limits hold for one
process: several processes sharing a store (the Postgres store) each keep
their own governor, so give each its share of the provider's limit.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

from .._errors import ConfigurationError, Transient
from ..protocols import WallClock
from ._governor_lane import Lane, LaneStatistics, Waiter
from ._governor_limit import RateLimit, checked_priority, current_priority

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from types import TracebackType

    from ..protocols import Clock

__all__ = ["Permit", "RateGovernor", "default_governor", "set_default_governor"]


class Permit:
    """A slot in a lane, held while one request is out (`RateGovernor.slot`).

    Leaving it counts the request answered; a `Transient` failure with a
    ``retry_after`` leaving it pauses the whole lane for that long.
    """

    __slots__ = ("_counted", "_estimate", "_governor", "_lane", "_priority", "_spent", "key")

    def __init__(
        self, governor: RateGovernor, key: str, lane: Lane, estimate: int, priority: float
    ) -> None:
        self._governor = governor
        self.key = key
        self._lane = lane
        self._estimate = estimate
        self._priority = priority
        self._spent: int | None = None
        self._counted = False

    def used(self, tokens: int) -> None:
        """The tokens the request really used (the reply's usage), replacing the estimate."""
        if tokens >= 0:
            self._spent = int(tokens)

    async def __aenter__(self) -> Permit:
        self._counted = await self._governor._acquire(self._lane, self._estimate, self._priority)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        governor, lane = self._governor, self._lane
        wait = exc.retry_after if isinstance(exc, Transient) else None
        if wait is not None and math.isfinite(wait):
            governor.pause(self.key, wait)
            self._spent = 0  # refused: its tokens were not spent
        if self._counted:
            spent = self._estimate if self._spent is None else self._spent
            lane.release(self._estimate, spent, governor.clock.now())


class RateGovernor:
    """Requests- and tokens-per-minute limits per model key, shared by every session using it.

    ::

        from arkhon_rheo.models import RateLimit, default_governor

        default_governor().set_limit(client, RateLimit(requests_per_minute=500))

    Every model call an agent makes goes through the process's default
    governor (`default_governor`) when its client names a ``base_url`` (the
    OpenAI and Anthropic clients do); a client wrapped with `governed` uses
    the governor it names. With no limit set for a key, the governor only
    shares pauses: after a 429 with ``Retry-After``, every session on that
    key waits it out together instead of each retrying on its own.

    Calls that must wait are served by priority (`rate_priority`; the engine
    gives the fraction of the session's budget left), then in the order they
    asked. The limits are per process: with a store shared by several
    processes (Postgres), give each process its share. A governor serves the
    sessions of one event loop at a time (as a process's sessions are); a
    program running loops in several threads gives each its own.

    Args:
        limits: Limits by key (a string, as `key_of` makes them).
        clock: What it tells the time and sleeps by (the machine's clock by default;
            ``arkhon_rheo.testing.VirtualClock`` in tests).
    """

    __slots__ = ("_lanes", "_seq", "clock")

    def __init__(
        self, limits: Mapping[str, RateLimit] | None = None, *, clock: Clock | None = None
    ) -> None:
        self.clock: Clock = WallClock() if clock is None else clock
        self._lanes: dict[str, Lane] = {}
        self._seq: Iterator[int] = itertools.count()
        for key, limit in (limits or {}).items():
            self.set_limit(key, limit)

    def __repr__(self) -> str:
        return f"RateGovernor(keys={sorted(self._lanes)!r}, clock={self.clock!r})"

    @staticmethod
    def key_of(client: object) -> str:
        """A client's model key: ``system|base_url|model`` (what a provider limits by)."""
        system = getattr(client, "system", None) or type(client).__name__
        base_url = getattr(client, "base_url", None) or ""
        model = getattr(client, "model", None) or ""
        return f"{system}|{base_url}|{model}"

    def set_limit(self, target: object, limit: RateLimit | None) -> str:
        """Limit a key (a string, or a client whose `key_of` it is); None lifts its limit.

        Returns:
            The key.

        Raises:
            ConfigurationError: ``limit`` is not a `RateLimit` or None, or the key is empty.
        """
        key = target if isinstance(target, str) else self.key_of(target)
        if not key:
            raise ConfigurationError("a rate limit's key must be a non-empty string")
        if limit is not None and not isinstance(limit, RateLimit):
            raise ConfigurationError(
                f"set_limit({key!r}, ...) takes a RateLimit or None, got {type(limit).__name__}"
            )
        lane = self._lane(key)
        lane.limit = limit
        lane.kick_head()
        return key

    def limit_of(self, key: str) -> RateLimit | None:
        """The limit of ``key``, or None."""
        lane = self._lanes.get(key)
        return None if lane is None else lane.limit

    def pause(self, key: str, seconds: float) -> None:
        """Close ``key``'s lane for ``seconds`` (a server said so); every call on it waits.

        Raises:
            ConfigurationError: ``seconds`` is negative or not a finite number.
        """
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ConfigurationError(
                f"pause({key!r}, {seconds!r}): give a finite number of seconds, zero or more"
            )
        lane = self._lane(key)
        until = self.clock.now() + float(seconds)
        lane.pauses += 1
        if until > lane.closed_until:
            lane.closed_until = until
            lane.kick_head()

    def statistics(self, key: str) -> LaneStatistics:
        """Where ``key`` stands now."""
        return self._lane(key).statistics(self.clock.now())

    def slot(self, key: str, *, tokens: int = 0, priority: float | None = None) -> Permit:
        """A slot for one request on ``key``: ``async with governor.slot(key) as permit:``.

        Entering waits until the request may go; leaving counts it answered
        (call ``permit.used(n)`` with the reply's tokens first).

        Args:
            key: The model key.
            tokens: The request's estimated tokens (prompt and the most the reply may use).
            priority: Higher is served first; by default `current_priority`.
        """
        chosen = current_priority() if priority is None else checked_priority(priority)
        return Permit(self, key, self._lane(key), max(0, int(tokens)), chosen)

    def _lane(self, key: str) -> Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(None)
        return lane

    async def _acquire(self, lane: Lane, tokens: int, priority: float) -> bool:
        """Wait for a slot in ``lane``; whether the request is counted in its window."""
        clock = self.clock
        if not lane.queue:
            now = clock.now()
            at = lane.ready_at(now, tokens)
            if at is not None and at <= now:
                return lane.grant(tokens)
        waiter = Waiter()
        heapq.heappush(lane.queue, (-priority, next(self._seq), waiter))
        try:
            while True:
                if lane.head() is not waiter:
                    await waiter.wait(clock, None)  # until it heads the queue
                    continue
                now = clock.now()
                at = lane.ready_at(now, tokens)
                if at is not None and at <= now:
                    heapq.heappop(lane.queue)
                    counted = lane.grant(tokens)
                    lane.kick_head()  # the next one times its own wait
                    return counted
                await waiter.wait(clock, at)  # until then, a reply, or a change
        except BaseException:
            if lane.head() is waiter:
                heapq.heappop(lane.queue)
                lane.kick_head()
            else:
                waiter.cancelled = True
                lane.cancelled += 1
            raise


_DEFAULT: list[RateGovernor | None] = [RateGovernor()]


def default_governor() -> RateGovernor | None:
    """The process's governor, which every agent's model calls go through (None: off)."""
    return _DEFAULT[0]


def set_default_governor(governor: RateGovernor | None) -> RateGovernor | None:
    """Make ``governor`` the process's default (None turns default governing off).

    Returns:
        The previous default.
    """
    if governor is not None and not isinstance(governor, RateGovernor):
        raise ConfigurationError(
            f"set_default_governor takes a RateGovernor or None, got {type(governor).__name__}"
        )
    previous, _DEFAULT[0] = _DEFAULT[0], governor
    return previous
