"""arkhon-rheo: a supervised actor runtime for LLM agents, on anyio.

This module is the facade: it re-exports the public names and has no side
effects (no logging set-up, no event loop, no threads).
"""

from __future__ import annotations

from ._errors import ActorError as ActorError
from ._errors import ActorStopped as ActorStopped
from ._errors import ArkhonError as ArkhonError
from ._errors import AskTimeout as AskTimeout
from ._errors import ConfigurationError as ConfigurationError
from ._errors import ContractViolation as ContractViolation
from ._errors import DuplicateEvent as DuplicateEvent
from ._errors import Fatal as Fatal
from ._errors import IllegalTransition as IllegalTransition
from ._errors import InvalidPatch as InvalidPatch
from ._errors import InvariantViolation as InvariantViolation
from ._errors import MailboxClosed as MailboxClosed
from ._errors import MailboxError as MailboxError
from ._errors import MailboxFull as MailboxFull
from ._errors import PreconditionFailed as PreconditionFailed
from ._errors import ReadOnlyState as ReadOnlyState
from ._errors import RecordedCallFailed as RecordedCallFailed
from ._errors import Recoverable as Recoverable
from ._errors import ReplayDiverged as ReplayDiverged
from ._errors import RestartIntensityExceeded as RestartIntensityExceeded
from ._errors import SessionBusy as SessionBusy
from ._errors import SessionError as SessionError
from ._errors import SessionLocked as SessionLocked
from ._errors import SessionNotFound as SessionNotFound
from ._errors import StageFailure as StageFailure
from ._errors import StageTimeout as StageTimeout
from ._errors import StoreCorrupt as StoreCorrupt
from ._errors import StoreError as StoreError
from ._errors import SubgraphFailed as SubgraphFailed
from ._errors import SystemNotRunning as SystemNotRunning
from ._errors import ToolTimeout as ToolTimeout
from ._errors import Transient as Transient
from ._errors import TransitionInvariantViolation as TransitionInvariantViolation
from ._errors import UndeclaredRead as UndeclaredRead
from ._errors import UndeclaredWrite as UndeclaredWrite
from ._errors import UnrecordableCall as UnrecordableCall
from ._errors import UnserializablePatch as UnserializablePatch
from ._exports import publish
from ._log import configure_logging as configure_logging
from ._redact import redact_secrets as redact_secrets
from .actors import Actor as Actor
from .actors import ActorRef as ActorRef
from .actors import ActorSystem as ActorSystem
from .actors import Directive as Directive
from .actors import Termination as Termination
from .actors import TerminationKind as TerminationKind
from .graphs import SubgraphStage as SubgraphStage
from .graphs import subgraph as subgraph
from .protocols import AgentState as AgentState
from .protocols import Condition as Condition
from .protocols import Durability as Durability
from .protocols import ErrorClass as ErrorClass
from .protocols import FailureRecord as FailureRecord
from .protocols import FrozenMap as FrozenMap
from .protocols import Gate as Gate
from .protocols import History as History
from .protocols import Lifecycle as Lifecycle
from .protocols import Machine as Machine
from .protocols import Partial as Partial
from .protocols import Patch as Patch
from .protocols import SessionStream as SessionStream
from .protocols import Stage as Stage
from .protocols import StateView as StateView
from .protocols import TransitionCondition as TransitionCondition
from .protocols import TransitionEvent as TransitionEvent
from .protocols import emit as emit
from .protocols import record_call as record_call
from .protocols import record_stream as record_stream
from .protocols import recorded as recorded
from .protocols import stage as stage
from .store import MemoryStore as MemoryStore
from .store import SQLiteStore as SQLiteStore
from .supervision import Backoff as Backoff
from .supervision import CallPlayback as CallPlayback
from .supervision import CallRecorder as CallRecorder
from .supervision import Classifier as Classifier
from .supervision import ExitReason as ExitReason
from .supervision import RestartIntensity as RestartIntensity
from .supervision import RestartStrategy as RestartStrategy
from .supervision import RestartWindow as RestartWindow
from .supervision import StageMode as StageMode
from .system import AgentStatistics as AgentStatistics
from .system import AgentSystem as AgentSystem
from .system import Divergence as Divergence
from .system import ReplayReport as ReplayReport
from .system import SessionHandle as SessionHandle
from .system import SessionResult as SessionResult
from .system import StoredSession as StoredSession

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ActorError",
    "ActorRef",
    "ActorStopped",
    "ActorSystem",
    "AgentState",
    "AgentStatistics",
    "AgentSystem",
    "ArkhonError",
    "AskTimeout",
    "Backoff",
    "CallPlayback",
    "CallRecorder",
    "Classifier",
    "Condition",
    "ConfigurationError",
    "ContractViolation",
    "Directive",
    "Divergence",
    "DuplicateEvent",
    "Durability",
    "ErrorClass",
    "ExitReason",
    "FailureRecord",
    "Fatal",
    "FrozenMap",
    "Gate",
    "History",
    "IllegalTransition",
    "InvalidPatch",
    "InvariantViolation",
    "Lifecycle",
    "Machine",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "MemoryStore",
    "Partial",
    "Patch",
    "PreconditionFailed",
    "ReadOnlyState",
    "RecordedCallFailed",
    "Recoverable",
    "ReplayDiverged",
    "ReplayReport",
    "RestartIntensity",
    "RestartIntensityExceeded",
    "RestartStrategy",
    "RestartWindow",
    "SQLiteStore",
    "SessionBusy",
    "SessionError",
    "SessionHandle",
    "SessionLocked",
    "SessionNotFound",
    "SessionResult",
    "SessionStream",
    "Stage",
    "StageFailure",
    "StageMode",
    "StageTimeout",
    "StateView",
    "StoreCorrupt",
    "StoreError",
    "StoredSession",
    "SubgraphFailed",
    "SubgraphStage",
    "SystemNotRunning",
    "Termination",
    "TerminationKind",
    "ToolTimeout",
    "Transient",
    "TransitionCondition",
    "TransitionEvent",
    "TransitionInvariantViolation",
    "UndeclaredRead",
    "UndeclaredWrite",
    "UnrecordableCall",
    "UnserializablePatch",
    "configure_logging",
    "emit",
    "record_call",
    "record_stream",
    "recorded",
    "redact_secrets",
    "stage",
    "subgraph",
]

publish(__name__, __all__, globals())
del publish
