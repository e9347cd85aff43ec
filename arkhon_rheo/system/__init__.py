"""The agent system: running sessions, their handles, and the sessions the store keeps.

`AgentSystem` supervises every session one_for_one inside your event loop;
`SessionHandle` is a running (or ended) session's handle, `SessionResult` how
it ended; `StoredSession` is a session as the store keeps it (history, replay,
fork, rollback, resume, and the answers to a gate).
"""

from __future__ import annotations

from .._exports import publish
from ._handle import SessionHandle as SessionHandle
from ._handle import SessionResult as SessionResult
from ._registry import AgentStatistics as AgentStatistics
from ._stored import StoredSession as StoredSession
from ._system import AgentSystem as AgentSystem

__all__ = [
    "AgentStatistics",
    "AgentSystem",
    "SessionHandle",
    "SessionResult",
    "StoredSession",
]

publish(__name__, __all__, globals())
del publish
