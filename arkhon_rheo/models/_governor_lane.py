"""A `RateGovernor`'s lane for one model key: its window, its pause and its queue.

A lane counts the requests (and tokens) out now and those answered within
the last window; answered ones leave the window in the order they came back.
Callers that cannot go wait in its queue (a heap by priority, then arrival);
the one at the head sleeps on the clock until it may go, the others on an
event, and whatever changes the lane wakes (kicks) the head.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from ..protocols import Clock
    from ._governor_limit import RateLimit

__all__ = ["Lane", "LaneStatistics", "Waiter"]


@dataclass(frozen=True, slots=True)
class LaneStatistics:
    """Where one model key stands now (`RateGovernor.statistics`).

    Attributes:
        limit: Its limits, or None.
        in_flight: Requests sent and not answered yet.
        waiting: Calls waiting for a slot.
        requests_in_window: Requests counted in the window now (in flight included).
        tokens_in_window: Tokens counted in the window now (estimates while in flight).
        closed_until: Until when a server asked every call to wait (a clock time), or None.
        requests: Requests granted since the governor was made.
        pauses: Times a server asked to wait (429s with a retry-after).
    """

    limit: RateLimit | None
    in_flight: int
    waiting: int
    requests_in_window: int
    tokens_in_window: int
    closed_until: float | None
    requests: int
    pauses: int


class Waiter:
    """One call waiting in a lane's queue; it is woken (kicked) when things change."""

    __slots__ = ("cancelled", "event", "scope")

    def __init__(self) -> None:
        self.cancelled = False
        self.event: anyio.Event | None = None
        self.scope: anyio.CancelScope | None = None

    def kick(self) -> None:
        if self.event is not None:
            self.event.set()
        if self.scope is not None:
            self.scope.cancel()

    async def wait(self, clock: Clock, until: float | None) -> None:
        """Wait for a kick, or (with ``until``) until the clock says ``until``."""
        self.event = anyio.Event()
        if until is None:
            await self.event.wait()
        else:
            with anyio.CancelScope() as scope:
                self.scope = scope
                await clock.sleep_until(until)
            self.scope = None
        self.event = None


class Lane:
    """One key's window, pause and queue."""

    __slots__ = (
        "cancelled",
        "closed_until",
        "finished",
        "finished_tokens",
        "granted",
        "in_flight",
        "in_flight_tokens",
        "last_expiry",
        "limit",
        "pauses",
        "queue",
    )

    def __init__(self, limit: RateLimit | None) -> None:
        self.limit = limit
        self.closed_until = -math.inf
        self.in_flight = 0
        self.in_flight_tokens = 0
        # (expiry, tokens) of answered requests, oldest first (expiries never decrease).
        self.finished: deque[tuple[float, int]] = deque()
        self.finished_tokens = 0
        self.last_expiry = -math.inf
        self.queue: list[tuple[float, int, Waiter]] = []
        self.cancelled = 0
        self.granted = 0
        self.pauses = 0

    def head(self) -> Waiter | None:
        queue = self.queue
        while queue and queue[0][2].cancelled:
            heapq.heappop(queue)
            self.cancelled -= 1
        return queue[0][2] if queue else None

    def kick_head(self) -> None:
        head = self.head()
        if head is not None:
            head.kick()

    def prune(self, now: float) -> None:
        finished = self.finished
        while finished and finished[0][0] <= now:
            self.finished_tokens -= finished.popleft()[1]

    def ready_at(self, now: float, tokens: int) -> float | None:
        """When a request of ``tokens`` may go (``now`` or later), or None: after a reply."""
        at = max(now, self.closed_until)
        limit = self.limit
        if limit is None:
            return at
        self.prune(now)
        finished = self.finished
        requests = limit.requests
        if requests is not None:
            excess = self.in_flight + len(finished) + 1 - requests
            if excess > 0:
                if excess > len(finished):
                    return None
                at = max(at, finished[excess - 1][0])
        allowed = limit.tokens
        if allowed is not None:
            # A request larger than the whole window goes when the window is empty.
            excess = self.in_flight_tokens + self.finished_tokens + min(tokens, allowed) - allowed
            if excess > 0:
                for expiry, spent in finished:
                    excess -= spent
                    if excess <= 0:
                        at = max(at, expiry)
                        break
                else:
                    return None
        return at

    def grant(self, tokens: int) -> bool:
        """Count a request going out; whether it is counted in the window."""
        self.granted += 1
        if self.limit is None:
            return False
        self.in_flight += 1
        self.in_flight_tokens += tokens
        return True

    def release(self, estimate: int, spent: int, now: float) -> None:
        """Count a request answered: in the window for one window from ``now``."""
        limit = self.limit
        self.in_flight = max(0, self.in_flight - 1)
        self.in_flight_tokens = max(0, self.in_flight_tokens - estimate)
        if limit is not None:
            expiry = max(now + limit.window, self.last_expiry)
            self.last_expiry = expiry
            self.finished.append((expiry, spent))
            self.finished_tokens += spent
        self.kick_head()

    def statistics(self, now: float) -> LaneStatistics:
        self.prune(now)
        return LaneStatistics(
            limit=self.limit,
            in_flight=self.in_flight,
            waiting=len(self.queue) - self.cancelled,
            requests_in_window=self.in_flight + len(self.finished),
            tokens_in_window=self.in_flight_tokens + self.finished_tokens,
            closed_until=self.closed_until if self.closed_until > now else None,
            requests=self.granted,
            pauses=self.pauses,
        )
