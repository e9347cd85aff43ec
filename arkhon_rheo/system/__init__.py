"""The agent system: running sessions, their handles, and the sessions the store keeps.

`AgentSystem` supervises every session one_for_one inside your event loop;
`SessionHandle` is a running (or ended) session's handle, `SessionResult` how
it ended; `StoredSession` is a session as the store keeps it (history, replay,
fork, rollback, resume, and the answers to a gate); `ReplayReport` (and its
`Divergence`) is what checking a stored log found. `Worker` drives the
sessions a shared store has something to do for (`AgentSystem.submit` stores
them for it).

This is the facade over sessions, stores and workers: what it exports lives in
`arkhon_rheo.session`, with the rest of the session.
"""

from __future__ import annotations

from ..session import AgentStatistics as AgentStatistics
from ..session import AgentSystem as AgentSystem
from ..session import Divergence as Divergence
from ..session import ReplayReport as ReplayReport
from ..session import Reply as Reply
from ..session import Sent as Sent
from ..session import SessionHandle as SessionHandle
from ..session import SessionResult as SessionResult
from ..session import StoredSession as StoredSession
from ..session import Worker as Worker

__all__ = [
    "AgentStatistics",
    "AgentSystem",
    "Divergence",
    "ReplayReport",
    "Reply",
    "Sent",
    "SessionHandle",
    "SessionResult",
    "StoredSession",
    "Worker",
]
