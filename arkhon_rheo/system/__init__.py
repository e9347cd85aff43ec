"""The agent system: running sessions, their handles, and the sessions the store keeps.

`AgentSystem` supervises every session one_for_one inside your event loop;
`SessionHandle` is a running (or ended) session's handle, `SessionResult` how
it ended; `StoredSession` is a session as the store keeps it (history, replay,
fork, rollback, resume, and the answers to a gate); `ReplayReport` (and its
`Divergence`) is what checking a stored log found. `Worker` drives the
sessions a shared store has something to do for (`AgentSystem.submit` stores
them for it).
"""

from __future__ import annotations

from .._exports import publish
from ._ask import Reply as Reply
from ._handle import SessionHandle as SessionHandle
from ._handle import SessionResult as SessionResult
from ._mail import Sent as Sent
from ._registry import AgentStatistics as AgentStatistics
from ._stored import StoredSession as StoredSession
from ._system import AgentSystem as AgentSystem
from ._verify import Divergence as Divergence
from ._verify import ReplayReport as ReplayReport
from ._worker import Worker as Worker

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

publish(__name__, __all__, globals())
del publish
