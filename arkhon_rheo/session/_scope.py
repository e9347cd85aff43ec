"""Where a subgraph stage finds the system that runs its child: the session scope.

The agent system sets `SessionScope` in a context variable when it spawns a
session's supervisor; the supervisor's task (and every stage actor it spawns)
inherits it, so a subgraph stage running in that session finds both the
system, through the `SubgraphHost` protocol, and its own session. Nothing here
knows the agent system itself: it sits above this layer.
"""

from __future__ import annotations

import contextlib
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ..protocols import AgentState, FailureRecord, Machine
    from ._record import Session

__all__ = ["ChildOutcome", "SessionScope", "SubgraphHost", "current_scope", "session_scope"]


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child session ended.

    Attributes:
        state: Its last committed state.
        exit_reason: Why it ended (``"finished"``, ``"failed"``, ``"max_steps"``...).
        failure: The failure that ended it, if one did.
        unawaited: Whether its end may have been posted to the parent's inbox:
            a run of it the parent's step did not start and await here.
    """

    state: AgentState
    exit_reason: str
    failure: FailureRecord | None = None
    unawaited: bool = False


class SubgraphHost(Protocol):
    """What a subgraph stage asks of the system running its session."""

    async def run_child(
        self,
        machine: Machine[Any],
        state: AgentState,
        *,
        session_id: str,
        link: Mapping[str, Any],
        max_steps: int | None,
    ) -> ChildOutcome:
        """Run the child session ``session_id`` to its end and say how it ended.

        The one child per id: a child already running is awaited, a stored one
        that has not ended is resumed, one that has ended is answered from its
        stored state, one that waits (paused at a gate, parked for a message)
        is answered as such; only a child never started starts, from ``state``.
        """
        ...


class SessionScope:
    """The session a stage runs in, and the system that runs it.

    The session is held weakly: a context copied from a session's task can
    outlive the session (on asyncio, a cancelled deadline's timer keeps its
    context until the deadline's time), and must not keep it in memory.
    """

    __slots__ = ("_session", "host")

    def __init__(self, host: SubgraphHost, session: Session) -> None:
        self.host = host
        self._session = weakref.ref(session)

    @property
    def session(self) -> Session:
        """The session; it is alive whenever one of its stages asks."""
        session = self._session()
        if session is None:  # pragma: no cover - its tasks end before it can go
            raise RuntimeError("the session of this scope has been freed")
        return session

    def __repr__(self) -> str:
        return f"SessionScope(host={self.host!r}, session={self._session()!r})"


_SCOPE: ContextVar[SessionScope | None] = ContextVar("arkhon_rheo_session_scope", default=None)


def current_scope() -> SessionScope | None:
    """The scope of the session whose stage is running (``None`` outside any)."""
    return _SCOPE.get()


@contextlib.contextmanager
def session_scope(host: SubgraphHost, session: Session) -> Iterator[None]:
    """Set the scope for the tasks spawned inside the block (they copy the context)."""
    token = _SCOPE.set(SessionScope(host, session))
    try:
        yield
    finally:
        _SCOPE.reset(token)
