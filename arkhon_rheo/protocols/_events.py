"""`TransitionEvent`: the audited record of one step of a session."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._patch import Patch
    from ._state import FailureRecord

__all__ = ["EventKind", "TransitionEvent"]


class EventKind(enum.Enum):
    """What a transition event records."""

    #: A stage ran and its patch was committed, with the move its ``next`` chose.
    STEP = "step"
    #: A failure was recorded by the supervisor (error routes, failed state).
    FAILURE = "failure"
    #: The session started; the patch holds the initial business fields.
    START = "start"
    #: The state was returned to what it was after an earlier event; the patch
    #: sets every field to that value, and ``info`` names the two event numbers.
    ROLLBACK = "rollback"
    #: The session paused at a gate (``info``: the gate and the stage it guards).
    PAUSE = "pause"
    #: A human decision on a paused session: a resume value or an edit (the patch).
    DECISION = "decision"
    #: The session was resumed from the store; it changes nothing in the state.
    #: ``info``: who resumed it (``resumed_by``: host, pid, system), the event it
    #: went on from (``from_seq``), the status it had (``previous_status``), the
    #: dead owner whose lease was taken over (``taken_over``, if any) and, after a
    #: crash, the stage that was in flight and runs again (``rerun``).
    RESUME = "resume"
    #: The session, stored by an earlier version of its machine (or one whose
    #: state type has changed since), is read by this one from here on; the
    #: patch sets every field to its upgraded value, ``info`` holds the versions
    #: (``upgrade``: ``{"from": ..., "to": ...}``) and the new ``fingerprint``.
    UPGRADE = "upgrade"


class TransitionEvent(NamedTuple):
    """One committed step of a session: who ran, what it read and wrote, where it led.

    Events are append-only; ``seq`` numbers a session's events from 1. It is a
    named tuple, immutable and about four times cheaper to build than a frozen
    dataclass, which matters at one event per commit.

    Attributes:
        session_id: The session.
        seq: The event's position in the session's log, from 1.
        kind: What the event records.
        stage: The stage that ran (``None`` for supervisor-owned events).
        from_state: The lifecycle state before the step.
        to_state: The lifecycle state after it.
        reads: The stage's read set.
        writes: The fields the committed patch wrote.
        patch: The committed patch (for supervisor events, the fields it set).
        attempt: Which attempt of the stage invocation succeeded (1-based).
        started_at: Wall-clock time the step started (seconds since the epoch).
        finished_at: Wall-clock time it was committed.
        error: The failure recorded by this event, if any.
        info: Extra facts about the event (a rollback's ``rolled_back_from`` and
            ``rolled_back_to`` event numbers), as JSON data.
    """

    session_id: str
    seq: int
    kind: EventKind
    stage: str | None
    from_state: enum.Enum
    to_state: enum.Enum
    reads: frozenset[str]
    writes: frozenset[str]
    patch: Patch
    attempt: int
    started_at: float
    finished_at: float
    error: FailureRecord | None = None
    info: Mapping[str, Any] | None = None
