"""What a human decision is recorded through: a stored session's journal, or the session itself.

A session kept in memory only (no store) is its own record: `MemoryJournal`
answers for it what a `Journal` answers for a stored one about the gate it is
paused at, and commits an event made outside any stage through the session
itself. Both are a `Ledger`, so a human decision takes one path either way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .._errors import ConfigurationError, SessionError
from ..protocols import Patch, TransitionEvent
from ._record import ExitReason

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..protocols import AgentState, EventKind, FailureRecord, Machine
    from ._record import Session

__all__ = [
    "Ledger",
    "MemoryJournal",
    "PausedAt",
    "gate_of",
    "not_paused",
    "out_of_band_event",
]


class PausedAt(NamedTuple):
    """A session paused at a gate, as its record has it: what a decision starts from."""

    #: The state it is paused in.
    state: AgentState
    #: The name of the gate it is paused at (``None`` for a pause no gate named).
    gate: str | None
    #: The number the decision's event takes.
    next_seq: int
    #: What a run launched after the decision counts its events from.
    base_seq: int
    #: The events that run keeps in memory before its own (none with a store).
    history: Sequence[TransitionEvent]
    #: What its stored record says it waits for (``None`` in memory, or before records said).
    waiting: Any = None


class Ledger(Protocol):
    """A session's record, for an event made outside any stage: its `Journal` or itself."""

    async def paused(self) -> PausedAt:
        """The gate the session is paused at, and its state there.

        Raises:
            SessionError: If it is not paused.
        """
        ...

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
        waiting: Any = None,
    ) -> None:
        """Commit ``event``, which leads to ``state``; ``status`` is the session's from now on.

        ``applied`` is the inbox position of the decision message it applies (stored only);
        ``waiting``, what the session, still paused, waits for (stored only, in the same write).
        """
        ...


class MemoryJournal:
    """A session kept in memory only (no store), as its own record: a `Journal`'s twin.

    Args:
        session: The session, held by the agent system.
        machine: The machine it must run (`ConfigurationError` otherwise).
    """

    __slots__ = ("session",)

    def __init__(self, session: Session, machine: Machine[Any]) -> None:
        if session.machine.name != machine.name:
            raise ConfigurationError(
                f"session {session.session_id!r} runs machine {session.machine.name!r}, "
                f"not {machine.name!r}"
            )
        self.session = session

    async def paused(self) -> PausedAt:
        """The gate the session is paused at, and its state there.

        Raises:
            SessionError: If it is not paused.
        """
        session = self.session
        reason = session.exit_reason
        if reason is not ExitReason.PAUSED:
            status = "running" if reason is None else reason.value
            raise not_paused(session.session_id, status)
        log = session.log
        return PausedAt(
            session.state,
            gate_of(log[-1] if log else None),
            session.next_seq(),
            session.base_seq,
            log,
        )

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
        waiting: Any = None,
    ) -> None:
        """Commit ``event`` through the session (`Session.commit_out_of_band`).

        ``status`` is the stored record's; in memory the event says it (an event
        that moves the session to its failed state ends it failed).
        """
        self.session.commit_out_of_band(state, event)


def not_paused(session_id: str, status: str) -> SessionError:
    """The error for a decision on a session that is not paused (it is ``status``)."""
    return SessionError(
        f"session {session_id!r} is not paused (it is {status}); "
        "only a session waiting at a gate takes a decision",
        session_id=session_id,
    )


def gate_of(pause: TransitionEvent | None) -> str | None:
    """The name of the gate ``pause`` (a session's last event) paused it at."""
    return ((pause.info if pause else None) or {}).get("gate")


def out_of_band_event(
    session_id: str,
    seq: int,
    kind: EventKind,
    before: AgentState,
    after: AgentState,
    updates: Mapping[str, Any],
    info: dict[str, Any],
    error: FailureRecord | None = None,
) -> TransitionEvent:
    """An event made outside any stage (a rollback, a resume, a human decision)."""
    now = time.time()
    return TransitionEvent(
        session_id=session_id,
        seq=seq,
        kind=kind,
        stage=None,
        from_state=before.lifecycle,
        to_state=after.lifecycle,
        reads=frozenset(),
        writes=frozenset(updates),
        patch=Patch.of(dict(updates)),
        attempt=0,
        started_at=now,
        finished_at=now,
        error=error,
        info=info,
    )
