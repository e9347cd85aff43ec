"""What both stores share as a work queue: the claim's checks and the work signal.

Workers (`arkhon_rheo.system.Worker`) claim the sessions that have something
to do (see `arkhon_rheo.protocols.WorkQueue`) and, between claims, wait for
work: `WorkSignal` wakes them at once when this process wrote something that
may be work (a new session, a post, a park, a released lease); what other
processes write is found by the caller's next claim, at the latest when its
``timeout`` runs out (polling).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from ._codec import SessionRow

__all__ = ["WorkSignal", "check_claim", "check_timeout", "pick_claims"]


def check_claim(
    owner: str, machines: Collection[str], limit: int, ttl: float, now: float
) -> tuple[str, ...]:
    """Check a claim's arguments; return the machine names, sorted.

    Raises:
        ConfigurationError: If one is malformed, saying which.
    """
    if not isinstance(owner, str) or not owner:
        raise ConfigurationError(f"a claim's owner is a non-empty string, not {owner!r}")
    if isinstance(machines, str) or not all(isinstance(name, str) for name in machines):
        raise ConfigurationError(
            f"machines must be a collection of machine names, not {machines!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be a whole number >= 0, not {limit!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
    if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
        raise ConfigurationError(f"now must be seconds since the epoch, not {now!r}")
    return tuple(sorted(set(machines)))


def check_timeout(timeout: float) -> float:
    """``timeout`` as seconds to wait; `ConfigurationError` unless it is a number >= 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


class WorkSignal:
    """Set by a store's writes that may be work; waited on by `wait_for_work`.

    A write that comes while nobody waits is remembered: the next wait returns
    at once (it may find nothing to do; it never misses something).
    """

    __slots__ = ("_event", "_ready")

    def __init__(self) -> None:
        self._ready = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """There may be work now (call it from the event loop's thread)."""
        self._ready = True
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109
        """Return once `set` was called since the last wait returned, or after ``timeout``."""
        if self._ready:
            self._ready = False
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        event = self._event
        with anyio.move_on_after(timeout):
            await event.wait()
        self._ready = False


def pick_claims(
    sessions: Mapping[str, SessionRow],
    leases: Mapping[str, tuple[str, float]],
    names: Collection[str],
    limit: int,
    now: float,
    leased_at: float,
) -> list[str]:
    """The ids of up to ``limit`` sessions with something to do, oldest first (`MemoryStore`).

    A session of one of ``names`` that is ``"running"``, or ``"waiting"`` and due at
    ``now``, whose lease (if any) ran out by ``leased_at``.
    """
    found: list[str] = []
    for session_id, row in sessions.items():  # oldest first
        if len(found) >= limit:
            break
        if row[1] not in names or row[2] not in ("running", "waiting"):
            continue
        if row[2] == "waiting" and (row[9] is None or row[9] > now):
            continue
        held = leases.get(session_id)
        if held is not None and held[1] > leased_at:
            continue
        found.append(session_id)
    return found
