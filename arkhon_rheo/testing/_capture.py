"""`EventCapture`: an event listener that keeps every committed event and wakes who waits.

Pass it to `AgentSystem` (``listeners=[capture]``): it is called with each
event every session commits, in commit order, and keeps them by session. A
test then reads what happened (`events`, `kinds`, `states`) or waits for it
(`wait_for`): a waiter is woken by the commit that satisfies it, through an
anyio event, with no sleeping or polling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from .._errors import ConfigurationError

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable

    from ..protocols import EventKind, TransitionEvent

__all__ = ["EventCapture"]


class _Waiter:
    __slots__ = ("done", "error", "event", "session_id", "test")

    def __init__(
        self, session_id: str | None, test: Callable[[int, TransitionEvent], bool]
    ) -> None:
        self.session_id = session_id
        self.test = test
        self.done = anyio.Event()
        self.event: TransitionEvent | None = None
        self.error: Exception | None = None


class EventCapture:
    """Every event the sessions of a system commit, by session, as a listener sees them.

    ::

        capture = EventCapture()
        async with AgentSystem(path=None, listeners=[capture]) as system:
            await system.start(machine, state, session_id="s1")
            await capture.wait_for(lambda event: event.to_state is Lifecycle.FINISHED)
        assert capture.kinds("s1") == [EventKind.STEP] * 3
    """

    def __init__(self) -> None:
        self._all: list[TransitionEvent] = []
        self._by_session: dict[str, list[TransitionEvent]] = {}
        self._waiters: list[_Waiter] = []

    def __repr__(self) -> str:
        return f"EventCapture({len(self._all)} events of {len(self._by_session)} sessions)"

    def __call__(self, event: TransitionEvent) -> None:
        """Keep ``event`` and wake the waiters it satisfies (`AgentSystem` calls this)."""
        self._all.append(event)
        mine = self._by_session.setdefault(event.session_id, [])
        mine.append(event)
        if not self._waiters:
            return
        for waiter in list(self._waiters):
            if waiter.session_id is None:
                count = len(self._all)
            elif waiter.session_id == event.session_id:
                count = len(mine)
            else:
                continue
            try:
                satisfied = waiter.test(count, event)
            except Exception as exc:  # the waiter's predicate failed: it raises in wait_for
                waiter.error = exc
                satisfied = True
            if satisfied:
                self._wake(waiter, event)

    def _wake(self, waiter: _Waiter, event: TransitionEvent) -> None:
        waiter.event = event
        waiter.done.set()
        self._waiters.remove(waiter)

    # -- reading -----------------------------------------------------------------

    def sessions(self) -> list[str]:
        """The sessions that committed an event, in the order of their first one."""
        return list(self._by_session)

    def events(self, session_id: str | None = None) -> list[TransitionEvent]:
        """The events of ``session_id`` (of every session without one), in commit order."""
        if session_id is None:
            return list(self._all)
        return list(self._by_session.get(session_id, ()))

    def kinds(self, session_id: str | None = None) -> list[EventKind]:
        """The kinds of those events (`EventKind.STEP`, `EventKind.FAILURE`...), in order."""
        return [event.kind for event in self.events(session_id)]

    def states(self, session_id: str) -> list[enum.Enum]:
        """The lifecycle states the session's events led to (each ``to_state``), in order."""
        return [event.to_state for event in self.events(session_id)]

    def clear(self) -> None:
        """Forget the events captured so far (waiters keep waiting for new ones)."""
        self._all.clear()
        self._by_session.clear()

    # -- waiting -----------------------------------------------------------------

    async def wait_for(
        self,
        until: int | Callable[[TransitionEvent], bool],
        *,
        session_id: str | None = None,
    ) -> TransitionEvent:
        """Wait until ``until`` events were captured, or one for which ``until(event)`` holds.

        Only the events of ``session_id`` count, if given. Events captured
        already count: a wait that is satisfied returns at once (after a
        checkpoint). Nothing polls: the commit that satisfies the wait wakes it.
        Cancel it with a scope (``anyio.fail_after``) to bound it.

        Args:
            until: A number of events (at least 1), or a predicate over an event.
            session_id: Count only this session's events.

        Returns:
            The event that satisfied the wait: the ``until``-th, or the first
                matching the predicate.

        Raises:
            ConfigurationError: If ``until`` is neither a count from 1 nor callable.
            Exception: Whatever the predicate raised, on the event it raised on
                (the session that committed that event is not disturbed).
        """
        if isinstance(until, int) and not isinstance(until, bool):
            if until < 1:
                raise ConfigurationError(f"wait_for needs a count of events from 1, got {until}")
            wanted = until

            def test(count: int, event: TransitionEvent) -> bool:
                return count >= wanted

        elif callable(until):
            predicate = until

            def test(count: int, event: TransitionEvent) -> bool:
                return bool(predicate(event))

        else:
            raise ConfigurationError(
                f"wait_for takes a number of events or a predicate over an event, got {until!r}"
            )
        seen = self.events(session_id)
        for count, event in enumerate(seen, 1):
            if test(count, event):
                await anyio.lowlevel.checkpoint()
                return event
        waiter = _Waiter(session_id, test)
        self._waiters.append(waiter)
        try:
            await waiter.done.wait()
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.event is not None
        return waiter.event
