"""The agent state: lifecycle, business fields and metadata, in one frozen model."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ._frozen import FrozenMap, Metadata
from ._sensitive import SENSITIVE, sensitive_fields

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["SUPERVISOR_FIELDS", "AgentState", "ErrorClass", "FailureRecord", "Lifecycle"]


class Lifecycle(enum.Enum):
    """The lifecycle of a ReAct agent; machines may declare their own enum."""

    #: The session exists and holds the user's input; nothing has run yet.
    INITIALIZED = "Initialized"
    #: The model is deciding what to do next.
    THINKING = "Thinking"
    #: Tools the model asked for are running.
    ACTING = "Acting"
    #: Results are being turned into an observation or a final answer (a
    #: conversational ReAct agent observes here, between its answer and the
    #: user's next message).
    OBSERVING = "Observing"
    #: Done, with a final answer.
    FINISHED = "Finished"
    #: Stopped by an error; ``last_error`` says which.
    FAILED = "Failed"


class ErrorClass(enum.Enum):
    """How the supervisor treats a failure."""

    #: Retry the same stage invocation after a backoff, a bounded number of times.
    TRANSIENT = "transient"
    #: Restart the stage's actor, record the error in the state, and go on.
    RECOVERABLE = "recoverable"
    #: Move the session to its failed state.
    FATAL = "fatal"


class FailureRecord(BaseModel):
    """A structured record of a failure, kept in ``AgentState.last_error`` and events.

    Attributes:
        error_type: The exception's class name (``UndeclaredWrite``, ``TimeoutError``...).
        message: The exception's message.
        error_class: How it was classified.
        stage: The stage that failed, if any.
        lifecycle: The lifecycle state the session was in.
        attempt: Which attempt of the stage invocation failed (1-based).
        exit_reason: Set when the failure ended the session (``fatal``, ``max_steps``...).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_type: str
    message: str
    error_class: ErrorClass
    stage: str | None = None
    lifecycle: str | None = None
    attempt: int = 1
    exit_reason: str | None = None


#: Fields only the supervisor writes; a stage can never declare them as writes.
SUPERVISOR_FIELDS = frozenset({"lifecycle", "session_id", "iteration"})


class AgentState(BaseModel):
    """The base of every agent state: subclass it and add your business fields.

    The model is frozen: a commit makes a new version that shares every field it
    did not change with the previous one, and stages read the values themselves.
    So every field type must be immutable all the way down: ``tuple`` or
    `History` (for sequences that grow) instead of ``list``, ``frozenset``
    instead of ``set``, `FrozenMap` instead of ``dict``, ``bytes`` instead of
    ``bytearray``, frozen models and frozen dataclasses. `Machine` refuses a
    state type with a mutable field type, naming the field.

    A field whose value is a secret is marked `Sensitive`
    (``token: Annotated[str, Sensitive()]``): it is stored sealed and never
    shown; the state's ``repr`` shows ``[SENSITIVE]`` in its place.

    Attributes:
        lifecycle: The machine's current state; subclasses narrow its type to
            their own enum and give it a default.
        session_id: The session this state belongs to (set by the supervisor).
        iteration: How many times the session returned to its loop state;
            grows monotonically (supervisor-owned).
        last_error: The last failure recorded, if any.
        metadata: Free-form read-only data about the session (not business state).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    #: Names of the fields every state has, for the permission checks.
    base_fields: ClassVar[frozenset[str]] = frozenset(
        {"lifecycle", "session_id", "iteration", "last_error", "metadata"}
    )

    lifecycle: enum.Enum
    session_id: str = ""
    iteration: int = Field(default=0, ge=0)
    last_error: FailureRecord | None = None
    metadata: Metadata = Field(default_factory=FrozenMap)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """The fields ``repr`` shows: a `Sensitive` field's value masked."""
        hidden = sensitive_fields(type(self))
        for name, value in super().__repr_args__():
            yield (name, SENSITIVE) if name in hidden else (name, value)
