"""Starting a session: the checks every start makes, and `submit` (a session stored for a worker).

`AgentSystem.start` stores a session and drives it here; `submit` stores it
only, status ``"running"`` and no lease, for a `Worker` sharing the store to
claim and drive. Both check the machine and the initial state the same way
first (`checked_start`).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeVar

from .._errors import ConfigurationError, SessionError
from ..protocols import AgentState
from ._compiled import compiled
from ._options import check_initial

if TYPE_CHECKING:
    from ..protocols import Machine
    from ._host import Registry, SessionHost

__all__ = ["checked_start", "submit"]

S = TypeVar("S", bound=AgentState)


def checked_start(
    host: SessionHost, registry: Registry, machine: Machine[S], state: S, session_id: str | None
) -> tuple[str, S]:
    """The id of a new session of ``machine`` from ``state``, and its state, checked.

    Raises:
        SystemNotRunning: Outside the system's ``async with`` block.
        SessionError: If the id is taken here.
        ConfigurationError: If the state does not fit the machine, or the
            machine receives messages and the system has no store.
        InvariantViolation: If the initial state breaks an invariant.
    """
    check_initial(machine, state)
    if machine.messages and host.store is None:
        raise ConfigurationError(
            f"machine {machine.name!r} receives messages, which wait in a store: pass "
            "store=MemoryStore() (or a file) to the AgentSystem"
        )
    if session_id is None:
        session_id = uuid.uuid4().hex[:12]
    if session_id in registry:
        raise SessionError(
            f"session {session_id!r} exists already; pick another id", session_id=session_id
        )
    if state.session_id != session_id:
        state = state.model_copy(update={"session_id": session_id})
    compiled(machine).validator.check_invariants(state, machine.initial, stage="(start)")
    host.check_running()
    return session_id, state


async def submit(
    host: SessionHost, registry: Registry, machine: Machine[S], state: S, session_id: str | None
) -> str:
    """Store a new session for a worker to drive (see `AgentSystem.submit`); its id."""
    host.require_store("submit a session")
    session_id, state = checked_start(host, registry, machine, state, session_id)
    async with host.claim(session_id):  # no other call here makes it meanwhile
        await host.journal(machine, session_id).create(state)
    return session_id
