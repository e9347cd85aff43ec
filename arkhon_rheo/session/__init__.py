"""The session: one package for what runs, keeps and answers a session.

Its pure kernel's session half (the compiled machine and its tables, the
in-memory event log, sealed mail), its runner (the supervisor, its stages, the
commit, the inbox, failures and the restart policy, the write to the store,
call recording and playback), the agent system's insides (the journal that
loads and keeps a session in its store, the host that launches and resumes it,
the postman that delivers its messages, claims and leases, stored forms and
upgrades, handles, asks, stored sessions, replay, the `AgentSystem` and its
`Worker`) and subgraphs (a machine as a stage of another, run as a child
session). It builds on `arkhon_rheo.core` (the codec, the digest, validation,
the fold, the fingerprint, sealed values), `arkhon_rheo.actors`,
`arkhon_rheo.store` and `arkhon_rheo.protocols`.

Its public names have their documented homes in the facades above it:
`arkhon_rheo.supervision` (the restart policy, `ExitReason`, `StageMode`),
`arkhon_rheo.graphs` (subgraphs) and `arkhon_rheo.system` (the agent system);
each of them reports that home as its module.
"""

from __future__ import annotations

from .._exports import publish
from ._host import AgentStatistics as AgentStatistics
from ._mail import Sent as Sent
from ._messaging import Reply as Reply
from ._policy import Backoff as Backoff
from ._policy import Classifier as Classifier
from ._policy import RestartIntensity as RestartIntensity
from ._policy import RestartStrategy as RestartStrategy
from ._policy import RestartWindow as RestartWindow
from ._record import ExitReason as ExitReason
from ._record import SessionHandle as SessionHandle
from ._record import SessionResult as SessionResult
from ._record import StageMode as StageMode
from ._replay import Divergence as Divergence
from ._replay import ReplayReport as ReplayReport
from ._stored import StoredSession as StoredSession
from ._subgraph import SubgraphStage as SubgraphStage
from ._subgraph import subgraph as subgraph
from ._system import AgentSystem as AgentSystem
from ._worker import Worker as Worker

#: Each public name's documented home: the facade that exports it.
_HOMES = {
    "arkhon_rheo.supervision": [
        "Backoff",
        "Classifier",
        "ExitReason",
        "RestartIntensity",
        "RestartStrategy",
        "RestartWindow",
        "StageMode",
    ],
    "arkhon_rheo.graphs": ["SubgraphStage", "subgraph"],
    "arkhon_rheo.system": [
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
    ],
}

__all__ = [
    "AgentStatistics",
    "AgentSystem",
    "Backoff",
    "Classifier",
    "Divergence",
    "ExitReason",
    "ReplayReport",
    "Reply",
    "RestartIntensity",
    "RestartStrategy",
    "RestartWindow",
    "Sent",
    "SessionHandle",
    "SessionResult",
    "StageMode",
    "StoredSession",
    "SubgraphStage",
    "Worker",
    "subgraph",
]

for _home, _names in _HOMES.items():
    publish(_home, _names, globals(), private=__name__)
del _home, _names, publish
