"""Data contracts and interfaces shared by every layer: contracts only, no running code.

The agent state and its failure record, the patch a stage proposes, the stage
contract with its read-only view, the machine and its graph (`StateGraph`,
drawn as Mermaid), the transition event, the entry points that record a
stage's model and tool calls (`record_call`, `record_stream`, `recorded`), the
partial output a stage emits while it runs (`emit`, `Partial`, and the
`SessionStream` protocol of a subscription), and the chat contract (messages,
replies, tool specs, the model-client protocol).

What answers the entry points is running code and lives beside its users: the
partial-output hub and the call recorder in ``arkhon_rheo.session``, the
context variables a running stage is seen through (fault injector, recorder,
output scope, resources) in a private package below this layer, the only
part of the library it imports.
"""

from __future__ import annotations

from .._exports import publish
from ._events import EventKind as EventKind
from ._events import TransitionEvent as TransitionEvent
from ._frozen import FrozenMap as FrozenMap
from ._gates import Abort as Abort
from ._gates import Approve as Approve
from ._gates import Edit as Edit
from ._gates import Gate as Gate
from ._graph import GraphEdge as GraphEdge
from ._graph import StateGraph as StateGraph
from ._history import History as History
from ._inbox import Clock as Clock
from ._inbox import Receive as Receive
from ._inbox import WallClock as WallClock
from ._inbox import message_kind as message_kind
from ._inbox import schedule as schedule
from ._io import record_call as record_call
from ._io import record_stream as record_stream
from ._io import recorded as recorded
from ._machine import Machine as Machine
from ._model import AssistantMessage as AssistantMessage
from ._model import FinishReason as FinishReason
from ._model import Message as Message
from ._model import ModelClient as ModelClient
from ._model import ModelReply as ModelReply
from ._model import NamedModelClient as NamedModelClient
from ._model import ReplyDelta as ReplyDelta
from ._model import ResponseSchema as ResponseSchema
from ._model import StreamingModelClient as StreamingModelClient
from ._model import SystemMessage as SystemMessage
from ._model import ToolCall as ToolCall
from ._model import ToolMessage as ToolMessage
from ._model import ToolRunner as ToolRunner
from ._model import ToolSpec as ToolSpec
from ._model import Usage as Usage
from ._model import UserMessage as UserMessage
from ._patch import Patch as Patch
from ._sensitive import Sensitive as Sensitive
from ._stage import Condition as Condition
from ._stage import Stage as Stage
from ._stage import StateView as StateView
from ._stage import TransitionCondition as TransitionCondition
from ._stage import stage as stage
from ._state import SUPERVISOR_FIELDS as SUPERVISOR_FIELDS
from ._state import AgentState as AgentState
from ._state import ErrorClass as ErrorClass
from ._state import FailureRecord as FailureRecord
from ._state import Lifecycle as Lifecycle
from ._store import Durability as Durability
from ._store import EffectStatus as EffectStatus
from ._store import LeaseRecord as LeaseRecord
from ._store import LoadedSession as LoadedSession
from ._store import NewMessage as NewMessage
from ._store import SessionRecord as SessionRecord
from ._store import Store as Store
from ._store import StoredEffect as StoredEffect
from ._store import StoredEvent as StoredEvent
from ._store import StoredMessage as StoredMessage
from ._store import StoreStatistics as StoreStatistics
from ._stream import Partial as Partial
from ._stream import SessionStream as SessionStream
from ._stream import SessionStreamStatistics as SessionStreamStatistics
from ._stream import emit as emit
from ._upgrade import Upgrade as Upgrade
from ._work_queue import WorkQueue as WorkQueue

__all__ = [
    "SUPERVISOR_FIELDS",
    "Abort",
    "AgentState",
    "Approve",
    "AssistantMessage",
    "Clock",
    "Condition",
    "Durability",
    "Edit",
    "EffectStatus",
    "ErrorClass",
    "EventKind",
    "FailureRecord",
    "FinishReason",
    "FrozenMap",
    "Gate",
    "GraphEdge",
    "History",
    "LeaseRecord",
    "Lifecycle",
    "LoadedSession",
    "Machine",
    "Message",
    "ModelClient",
    "ModelReply",
    "NamedModelClient",
    "NewMessage",
    "Partial",
    "Patch",
    "Receive",
    "ReplyDelta",
    "ResponseSchema",
    "Sensitive",
    "SessionRecord",
    "SessionStream",
    "SessionStreamStatistics",
    "Stage",
    "StateGraph",
    "StateView",
    "Store",
    "StoreStatistics",
    "StoredEffect",
    "StoredEvent",
    "StoredMessage",
    "StreamingModelClient",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "ToolRunner",
    "ToolSpec",
    "TransitionCondition",
    "TransitionEvent",
    "Upgrade",
    "Usage",
    "UserMessage",
    "WallClock",
    "WorkQueue",
    "emit",
    "message_kind",
    "record_call",
    "record_stream",
    "recorded",
    "schedule",
    "stage",
]

publish(__name__, __all__, globals())
del publish
