"""Every exception class of arkhon-rheo, one module per layer that raises them.

The tree, and what each class means, is drawn once: in the docstring of
`arkhon_rheo.errors`, the public home of every name here. A new class is
defined here, exported below and in `arkhon_rheo.errors`, and drawn in that tree.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

from ._agent import AmbiguousEffect as AmbiguousEffect
from ._agent import AnswerUnavailable as AnswerUnavailable
from ._agent import IsolationUnavailable as IsolationUnavailable
from ._agent import MalformedModelOutput as MalformedModelOutput
from ._agent import ToolCallHeld as ToolCallHeld
from ._agent import ToolError as ToolError
from ._base import ActorError as ActorError
from ._base import ActorStopped as ActorStopped
from ._base import ArkhonError as ArkhonError
from ._base import AskTimeout as AskTimeout
from ._base import ConfigurationError as ConfigurationError
from ._base import KeyringError as KeyringError
from ._base import MailboxClosed as MailboxClosed
from ._base import MailboxError as MailboxError
from ._base import MailboxFull as MailboxFull
from ._base import ResourceUnavailable as ResourceUnavailable
from ._base import SystemNotRunning as SystemNotRunning
from ._cli import CommandError as CommandError
from ._sessions import DuplicateEvent as DuplicateEvent
from ._sessions import InboxFull as InboxFull
from ._sessions import LeaseLost as LeaseLost
from ._sessions import MessageRefused as MessageRefused
from ._sessions import NoReply as NoReply
from ._sessions import PoisonSession as PoisonSession
from ._sessions import RecordedCallFailed as RecordedCallFailed
from ._sessions import ReplayDiverged as ReplayDiverged
from ._sessions import SessionBusy as SessionBusy
from ._sessions import SessionError as SessionError
from ._sessions import SessionLocked as SessionLocked
from ._sessions import SessionNotFound as SessionNotFound
from ._sessions import SessionsDamaged as SessionsDamaged
from ._sessions import StoreCorrupt as StoreCorrupt
from ._sessions import StoreError as StoreError
from ._sessions import StoreUnavailable as StoreUnavailable
from ._sessions import StoreUpgrading as StoreUpgrading
from ._sessions import UnrecordableCall as UnrecordableCall
from ._sessions import UnserializablePatch as UnserializablePatch
from ._stages import ContractViolation as ContractViolation
from ._stages import Fatal as Fatal
from ._stages import IllegalTransition as IllegalTransition
from ._stages import InvalidPatch as InvalidPatch
from ._stages import InvariantViolation as InvariantViolation
from ._stages import PreconditionFailed as PreconditionFailed
from ._stages import ReadOnlyState as ReadOnlyState
from ._stages import Recoverable as Recoverable
from ._stages import RestartIntensityExceeded as RestartIntensityExceeded
from ._stages import StageFailure as StageFailure
from ._stages import StageTimeout as StageTimeout
from ._stages import SubgraphFailed as SubgraphFailed
from ._stages import ToolTimeout as ToolTimeout
from ._stages import Transient as Transient
from ._stages import TransitionInvariantViolation as TransitionInvariantViolation
from ._stages import UndeclaredRead as UndeclaredRead
from ._stages import UndeclaredWrite as UndeclaredWrite
from ._testing import CrashRunFailed as CrashRunFailed

__all__ = [
    "ActorError",
    "ActorStopped",
    "AmbiguousEffect",
    "AnswerUnavailable",
    "ArkhonError",
    "AskTimeout",
    "CommandError",
    "ConfigurationError",
    "ContractViolation",
    "CrashRunFailed",
    "DuplicateEvent",
    "Fatal",
    "IllegalTransition",
    "InboxFull",
    "InvalidPatch",
    "InvariantViolation",
    "IsolationUnavailable",
    "KeyringError",
    "LeaseLost",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "MalformedModelOutput",
    "MessageRefused",
    "NoReply",
    "PoisonSession",
    "PreconditionFailed",
    "ReadOnlyState",
    "RecordedCallFailed",
    "Recoverable",
    "ReplayDiverged",
    "ResourceUnavailable",
    "RestartIntensityExceeded",
    "SessionBusy",
    "SessionError",
    "SessionLocked",
    "SessionNotFound",
    "SessionsDamaged",
    "StageFailure",
    "StageTimeout",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "StoreUpgrading",
    "SubgraphFailed",
    "SystemNotRunning",
    "ToolCallHeld",
    "ToolError",
    "ToolTimeout",
    "Transient",
    "TransitionInvariantViolation",
    "UndeclaredRead",
    "UndeclaredWrite",
    "UnrecordableCall",
    "UnserializablePatch",
]
