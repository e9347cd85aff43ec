"""`Registry`: the sessions an `AgentSystem` holds in memory, and when it lets them go.

Running sessions are held; ended ones are kept up to a bound, newest first, and
released beyond it (a released session lives on while someone holds its
handle, found through a weak map). A session paused without a store is held
until it is decided: nothing else keeps it.
"""

from __future__ import annotations

import collections
import contextlib
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import SessionBusy, SessionNotFound
from ._record import ExitReason

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ..actors import SystemStatistics
    from ._handle import SessionHandle
    from ._record import Session

__all__ = ["AgentStatistics", "Registry"]


@dataclass(frozen=True, slots=True)
class AgentStatistics:
    """A snapshot of an agent system's counters.

    Attributes:
        sessions: Sessions this system holds: started or resumed here and not
            yet forgotten (`AgentSystem.forget`), ended ones included.
        running: Sessions not ended yet.
        actors: Actors alive (supervisors and stage actors).
        dead_letters: Messages that reached no actor.
        statuses: Those sessions by status: ``"running"`` or their `ExitReason`
            value (``"finished"``, ``"failed"``, ``"paused"``...), only those present.
        queued: Messages waiting now in the mailboxes of their supervisors.
    """

    sessions: int
    running: int
    actors: int
    dead_letters: int
    statuses: Mapping[str, int] = field(default_factory=dict)
    queued: int = 0


class Registry:
    """The sessions of one system, by id.

    Args:
        keep: How many ended sessions to keep, newest (see ``keep_ended``).
    """

    __slots__ = ("_ended", "_held", "_sessions", "awaited", "keep", "links")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        # Running sessions, and the newest `keep` ended ones, oldest first.
        self._sessions: dict[str, SessionHandle[Any]] = {}
        # The ids of the ended sessions in `_sessions`, in the order they ended.
        self._ended: collections.deque[str] = collections.deque()
        # Released ended sessions whose handles someone still holds.
        self._held: weakref.WeakValueDictionary[str, SessionHandle[Any]] = (
            weakref.WeakValueDictionary()
        )
        # Subgraphs: each child session's link to its parent step, by child id.
        self.links: dict[str, dict[str, Any]] = {}
        # The child sessions a parent's step here started and awaits.
        self.awaited: set[str] = set()

    def __contains__(self, session_id: object) -> bool:
        """Whether a session of that id is held, kept, or released but still referenced."""
        return session_id in self._sessions or session_id in self._held

    def __iter__(self) -> Iterator[SessionHandle[Any]]:
        """The handles held (running and kept), oldest first."""
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def cancel_running(self) -> None:
        """Cancel every session held that is still running."""
        for handle in list(self._sessions.values()):
            if not handle.done:
                handle.cancel()

    def ids(self) -> list[str]:
        """The ids held (running and kept), oldest first."""
        return list(self._sessions)

    def get(self, session_id: str) -> SessionHandle[Any] | None:
        """The handle held for ``session_id`` (running or kept), if any."""
        return self._sessions.get(session_id)

    def find(self, session_id: str) -> SessionHandle[Any] | None:
        """The handle of ``session_id`` held, kept, or released but still referenced."""
        return self._sessions.get(session_id) or self._held.get(session_id)

    def running(self, session_id: str) -> bool:
        """Whether ``session_id`` runs here now."""
        handle = self._sessions.get(session_id)
        return handle is not None and not handle.done

    def add(self, handle: SessionHandle[Any]) -> None:
        """Hold a session just launched (it replaces any earlier run of that id)."""
        session = handle._session
        self.drop(session.session_id)
        self._sessions[session.session_id] = handle
        if session.done.is_set():  # it ended before its handle existed
            self.closed(session)

    def closed(self, session: Session) -> None:
        """A session ended: keep it among the newest `keep`, or release it."""
        session_id = session.session_id
        handle = self._sessions.get(session_id)
        if handle is None or handle._session is not session:
            return  # a run replaced since (or its handle is not made yet)
        if session.keep_log and session.exit_reason is ExitReason.PAUSED:
            return  # without a store, nothing else holds it until it is decided
        self._ended.append(session_id)
        while len(self._ended) > self.keep:
            self._release(self._ended.popleft())

    def _release(self, session_id: str) -> None:
        """Stop holding an ended session: it lives on while someone holds its handle."""
        handle = self._sessions.get(session_id)
        if handle is None or not handle.done:
            return  # forgotten, or running again (resumed) since
        del self._sessions[session_id]
        self.links.pop(session_id, None)
        self._held[session_id] = handle

    def drop(self, session_id: str) -> None:
        """Stop holding ``session_id`` in any way (before it runs again, or to forget it)."""
        if self._sessions.pop(session_id, None) is not None:
            with contextlib.suppress(ValueError):
                self._ended.remove(session_id)
        self._held.pop(session_id, None)

    def statistics(self, actors: SystemStatistics) -> AgentStatistics:
        """The counters of the sessions held, with those of the system's ``actors``."""
        statuses: dict[str, int] = {}
        queued = 0
        for handle in self._sessions.values():
            reason = handle._session.exit_reason
            status = "running" if reason is None or not handle.done else reason.value
            statuses[status] = statuses.get(status, 0) + 1
            if not handle.done:
                queued += handle._ref.statistics().queued
        return AgentStatistics(
            sessions=len(self._sessions),
            running=statuses.get("running", 0),
            actors=actors.alive,
            dead_letters=actors.dead_letters,
            statuses=statuses,
            queued=queued,
        )

    def forget(self, session_id: str) -> None:
        """Drop ``session_id`` and its subgraph link."""
        self.drop(session_id)
        self.links.pop(session_id, None)

    def forget_ended(self, session_id: str, *, stored: bool) -> None:
        """`AgentSystem.forget`: drop an ended session (``stored``: the system has a store).

        Raises:
            SessionNotFound: Without a store, if no session here has that id.
            SessionBusy: If the session is still running.
        """
        if stored and session_id not in self:
            self.links.pop(session_id, None)
            return  # released already: the store holds its record
        handle = self.find(session_id)
        if handle is None:
            raise SessionNotFound(session_id=session_id)
        if not handle.done:
            raise SessionBusy(
                f"session {session_id!r} is still running; cancel it or wait for its "
                "result before forgetting it",
                session_id=session_id,
            )
        self.forget(session_id)
