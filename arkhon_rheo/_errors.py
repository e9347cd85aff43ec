"""The whole exception tree of arkhon-rheo.

Every error the library raises on purpose derives from one base, so callers can
catch the lot with ``except ArkhonError``, or one branch at a time::

    ArkhonError
    ├── ConfigurationError        a value passed to a constructor or call is wrong
    ├── SystemNotRunning          the actor system is not inside its ``async with``
    ├── MailboxError              a mailbox could not take or give a message
    │   ├── MailboxFull           no room, and the caller would not wait
    │   └── MailboxClosed         the mailbox no longer accepts messages
    ├── ActorError                an operation on an actor failed
    │   ├── ActorStopped          the actor has terminated (or is draining)
    │   └── AskTimeout            no reply arrived within the ask's timeout
    ├── StageFailure              raised by stages to classify their own failure
    │   ├── Transient             retry after a backoff
    │   │   └── ToolTimeout       a tool ran past its timeout (a sandboxed one is killed)
    │   ├── Recoverable           restart the stage, record the error, go on
    │   │   └── SubgraphFailed    a subgraph's child session ended without finishing
    │   └── Fatal                 fail the session
    ├── ContractViolation         the supervisor refused what a stage did
    │   ├── UndeclaredRead        read a field outside the read set
    │   ├── ReadOnlyState         tried to change the state through its view
    │   ├── UndeclaredWrite       patch writes a field outside the write set
    │   ├── InvalidPatch          a written value fails its field's validation
    │   ├── PreconditionFailed    the state does not meet a stage's precondition
    │   ├── InvariantViolation    a state would break an invariant of its lifecycle
    │   │   └── TransitionInvariantViolation  ...or of the transition that reaches it
    │   └── IllegalTransition     the machine does not allow the chosen transition
    ├── StageTimeout              a stage overran its state's deadline
    ├── RestartIntensityExceeded  too many restarts in the window: escalates to fatal
    ├── RecordedCallFailed        a recorded call failed; replayed, its class not rebuilt
    ├── SessionError              a session could not be started or run
    │   ├── SessionNotFound       no session has that id
    │   └── ReplayDiverged        a re-executed stage called out unlike the recorded run
    └── StoreError                the store failed, or refused what was asked
        ├── StoreCorrupt          not our file, another schema version, or damaged
        ├── DuplicateEvent        an event number is taken or out of order
        ├── UnserializablePatch   a patch value cannot be stored (refused before commit)
        ├── UnrecordableCall      a recorded call's request or response cannot be stored
        └── SessionLocked         another owner holds the session's lease

An exception raised by an actor's own handler during an ``ask`` is not wrapped:
it is re-raised at the caller as it is, with a note naming the actor.

Classification (`Transient`, `Recoverable`, `Fatal`) applies to ``Exception``
only: cancellation is never classified and always propagates, and any other
``BaseException`` a stage raises crashes its session and leaves the
``AgentSystem`` block in a ``BaseExceptionGroup``.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "ActorError",
    "ActorStopped",
    "ArkhonError",
    "AskTimeout",
    "ConfigurationError",
    "ContractViolation",
    "DuplicateEvent",
    "Fatal",
    "IllegalTransition",
    "InvalidPatch",
    "InvariantViolation",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "PreconditionFailed",
    "ReadOnlyState",
    "RecordedCallFailed",
    "Recoverable",
    "ReplayDiverged",
    "RestartIntensityExceeded",
    "SessionError",
    "SessionLocked",
    "SessionNotFound",
    "StageFailure",
    "StageTimeout",
    "StoreCorrupt",
    "StoreError",
    "SubgraphFailed",
    "SystemNotRunning",
    "ToolTimeout",
    "Transient",
    "UndeclaredRead",
    "UndeclaredWrite",
    "UnrecordableCall",
    "UnserializablePatch",
]


class ArkhonError(Exception):
    """Base class of every error arkhon-rheo raises on purpose."""


class ConfigurationError(ArkhonError, ValueError):
    """A value given to a constructor or a call is invalid.

    The message names the offending value and what is accepted instead.
    """


class SystemNotRunning(ArkhonError, RuntimeError):
    """The actor system is not running: not entered yet, stopping, or closed.

    The message names the state it is in.
    """


class MailboxError(ArkhonError):
    """A mailbox could not accept or deliver a message.

    Attributes:
        mailbox: The name of the mailbox (the actor's name for an actor's mailbox).
    """

    def __init__(self, message: str, *, mailbox: str) -> None:
        super().__init__(message)
        self.mailbox = mailbox


class MailboxFull(MailboxError):
    """The mailbox is at capacity and the caller asked not to wait.

    Attributes:
        mailbox: The name of the mailbox.
        capacity: How many messages the mailbox holds at most.
    """

    def __init__(self, *, mailbox: str, capacity: int) -> None:
        super().__init__(
            f"mailbox {mailbox!r} is full ({capacity} queued messages); use the awaiting "
            "send (tell) to wait for room, or raise the mailbox capacity",
            mailbox=mailbox,
        )
        self.capacity = capacity


class MailboxClosed(MailboxError):
    """The mailbox has been closed and accepts no more messages.

    Attributes:
        mailbox: The name of the mailbox.
    """

    def __init__(self, *, mailbox: str) -> None:
        super().__init__(
            f"mailbox {mailbox!r} is closed and accepts no more messages", mailbox=mailbox
        )


class ActorError(ArkhonError):
    """An operation on an actor failed.

    Attributes:
        actor: The name of the actor concerned.
    """

    def __init__(self, message: str, *, actor: str) -> None:
        super().__init__(message)
        self.actor = actor


class ActorStopped(ActorError):
    """The actor has terminated, or is stopping and accepts no new messages.

    Attributes:
        actor: The name of the actor.
    """

    def __init__(self, *, actor: str, detail: str = "") -> None:
        suffix = f" ({detail})" if detail else ""
        super().__init__(
            f"actor {actor!r} has stopped{suffix}; spawn a new actor or watch it to learn why",
            actor=actor,
        )


class AskTimeout(ActorError, TimeoutError):
    """No reply arrived within the ask's timeout.

    The request is withdrawn if the actor has not started on it yet; if it has,
    its late reply is discarded and never delivered to anybody else.

    Attributes:
        actor: The name of the actor asked.
        timeout: The timeout that expired, in seconds.
    """

    def __init__(self, *, actor: str, timeout: float) -> None:
        super().__init__(
            f"actor {actor!r} did not reply within {timeout:g} s; raise the timeout, or check "
            "that the actor is not blocked or its mailbox backed up",
            actor=actor,
        )
        self.timeout = timeout


class StageFailure(ArkhonError):
    """Raised by a stage (or a tool, or a model client) to say how to treat its failure.

    Raise one of the three subclasses directly, or wrap a third-party error:
    ``raise Transient("rate limited") from exc``. The supervisor fills in the
    context attributes when it records the failure.

    Attributes:
        stage: The stage that failed, once known.
    """

    def __init__(self, message: str = "", *, stage: str | None = None) -> None:
        super().__init__(message or type(self).__name__)
        self.stage = stage


class Transient(StageFailure):
    """A failure worth retrying as it is (a timeout, a rate limit, a dropped link).

    Attributes:
        stage: The stage that failed, once known.
        retry_after: The least time, in seconds, to wait before retrying, when
            the failing party said (a rate limit's ``Retry-After``); the
            supervisor's backoff waits at least this long. ``None`` when unknown.
    """

    retry_after: float | None = None  # also for instances rebuilt from a recorded call

    def __init__(
        self, message: str = "", *, stage: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, stage=stage)
        if retry_after is not None:
            self.retry_after = max(0.0, float(retry_after))


class ToolTimeout(Transient, TimeoutError):
    """A tool ran past its timeout: cancelled in-process, or its sandbox process killed.

    It is `Transient`, so the supervisor retries the stage that made the call
    under its backoff policy.

    Attributes:
        tool: The tool's name.
        timeout: The timeout that expired, in seconds.
    """

    def __init__(self, *, tool: str, timeout: float, detail: str = "") -> None:
        suffix = f"; {detail}" if detail else ""
        super().__init__(
            f"tool {tool!r} did not finish within {timeout:g} s and was stopped; raise its "
            f"timeout with @tool(timeout=...), or make it faster{suffix}"
        )
        self.tool = tool
        self.timeout = timeout


class Recoverable(StageFailure):
    """A failure the session survives: restart the stage, record the error, go on."""


class Fatal(StageFailure):
    """A failure that ends the session in its failed state."""


class SubgraphFailed(Recoverable):
    """A subgraph stage's child session ended without finishing.

    Recoverable, like any stage failure the session survives: the stage restarts
    and a later attempt runs a new child (register a rule for it on the
    `Classifier` to treat it otherwise).

    Attributes:
        session_id: The child session.
        exit_reason: How the child ended (``"failed"``, ``"max_steps"``...).
        failure: The child's failure record (a `FailureRecord`), if it has one.
    """

    def __init__(
        self, *, stage: str, session_id: str, exit_reason: str, failure: Any = None
    ) -> None:
        detail = (
            f": {failure.error_type}: {failure.message}"
            if failure is not None and hasattr(failure, "error_type")
            else ""
        )
        super().__init__(
            f"subgraph stage {stage!r}: child session {session_id!r} ended {exit_reason}"
            f"{detail}; see its history for what happened",
            stage=stage,
        )
        self.session_id = session_id
        self.exit_reason = exit_reason
        self.failure = failure


class ContractViolation(ArkhonError):
    """The supervisor refused what a stage did or proposed; nothing was committed.

    Attributes:
        stage: The stage at fault.
    """

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "nothing"


class UndeclaredRead(ContractViolation):
    """A stage read a field outside its declared read set.

    It is deliberately not an ``AttributeError``: ``getattr(view, name, default)``
    or ``hasattr`` must not quietly hide an undeclared read.

    Attributes:
        stage: The stage.
        field: The field it tried to read.
    """

    def __init__(self, *, stage: str, field: str, reads: Iterable[str]) -> None:
        super().__init__(
            f"stage {stage!r} read {field!r}, which is not in its read set "
            f"({_listing(reads)}); add it to the stage's reads",
            stage=stage,
        )
        self.field = field


class ReadOnlyState(ContractViolation, AttributeError):
    """A stage tried to assign or delete a field through its read-only view.

    Attributes:
        stage: The stage.
        field: The field it tried to change.
    """

    def __init__(self, *, stage: str, field: str) -> None:
        super().__init__(
            f"stage {stage!r} tried to change {field!r} through its view; the state is "
            "read-only: return a Patch that writes the field instead",
            stage=stage,
        )
        self.field = field


class UndeclaredWrite(ContractViolation):
    """A patch writes fields outside the stage's write set; it was not merged at all.

    Attributes:
        stage: The stage.
        fields: The undeclared fields the patch wrote.
    """

    def __init__(self, *, stage: str, fields: Iterable[str], writes: Iterable[str]) -> None:
        self.fields = tuple(sorted(fields))
        super().__init__(
            f"stage {stage!r} wrote {_listing(self.fields)}, outside its write set "
            f"({_listing(writes)}); the patch was rejected whole. Declare the field in the "
            "stage's writes, or leave it to the stage that owns it",
            stage=stage,
        )


class InvalidPatch(ContractViolation):
    """A value in a patch fails its field's validation, or the patch is malformed.

    Attributes:
        stage: The stage.
        field: The field whose value was refused.
    """

    def __init__(self, *, stage: str, field: str, reason: str) -> None:
        super().__init__(
            f"stage {stage!r} proposed an invalid value for {field!r}: {reason}", stage=stage
        )
        self.field = field


class PreconditionFailed(ContractViolation):
    """The committed state does not meet a precondition of the stage about to run.

    Attributes:
        stage: The stage.
        condition: The name of the condition that failed.
    """

    def __init__(self, *, stage: str, condition: str) -> None:
        super().__init__(f"precondition of stage {stage!r} not met: {condition}", stage=stage)
        self.condition = condition


class InvariantViolation(ContractViolation):
    """A candidate state breaks an invariant of its lifecycle state; it was not committed.

    Attributes:
        stage: The stage whose patch produced the candidate.
        invariant: The name of the invariant.
        lifecycle: The lifecycle state whose invariant it is.
    """

    def __init__(self, *, stage: str, invariant: str, lifecycle: str) -> None:
        super().__init__(
            f"invariant of {lifecycle!r} violated after stage {stage!r}: {invariant}",
            stage=stage,
        )
        self.invariant = invariant
        self.lifecycle = lifecycle


class TransitionInvariantViolation(InvariantViolation):
    """A step would take an edge whose transition invariant does not hold; it was not committed.

    Attributes:
        stage: The stage whose patch produced the candidate.
        invariant: The name of the transition invariant.
        lifecycle: The state the step would enter.
        from_state: The state the step started from.
        to_state: The state the step would enter (same as ``lifecycle``).
    """

    def __init__(self, *, stage: str, invariant: str, from_state: str, to_state: str) -> None:
        ContractViolation.__init__(
            self,
            f"invariant of the transition {from_state!r} -> {to_state!r} violated by stage "
            f"{stage!r}: {invariant}; the step was not committed (fix the stage's patch or "
            "its next())",
            stage=stage,
        )
        self.invariant = invariant
        self.lifecycle = to_state
        self.from_state = from_state
        self.to_state = to_state


class IllegalTransition(ContractViolation):
    """A stage chose a next state the machine does not allow from the current one.

    Attributes:
        stage: The stage whose ``next`` chose it.
        from_state: The current lifecycle state.
        to_state: The state chosen.
    """

    def __init__(
        self, *, stage: str, from_state: str, to_state: str, allowed: Iterable[str]
    ) -> None:
        super().__init__(
            f"stage {stage!r} chose {from_state!r} -> {to_state!r}, which the machine does "
            f"not allow (allowed: {_listing(allowed)})",
            stage=stage,
        )
        self.from_state = from_state
        self.to_state = to_state


class StageTimeout(ArkhonError, TimeoutError):
    """A stage overran the deadline of its lifecycle state and was cancelled.

    Attributes:
        stage: The stage.
        deadline: The deadline, in seconds.
    """

    def __init__(self, *, stage: str, deadline: float) -> None:
        super().__init__(f"stage {stage!r} overran its {deadline:g} s deadline and was cancelled")
        self.stage = stage
        self.deadline = deadline


class RestartIntensityExceeded(ArkhonError):
    """More restarts happened within the window than the policy allows.

    Attributes:
        stage: The stage whose failure tipped the balance.
        restarts: The limit.
        window: The window, in seconds.
    """

    def __init__(self, *, stage: str, restarts: int, window: float) -> None:
        super().__init__(
            f"more than {restarts} restarts within {window:g} s (last: stage {stage!r}); "
            "escalating to fatal. Fix the failing stage or relax the restart intensity"
        )
        self.stage = stage
        self.restarts = restarts
        self.window = window


class SessionError(ArkhonError):
    """A session could not be started, found or driven.

    Attributes:
        session_id: The session concerned.
    """

    def __init__(self, message: str, *, session_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id


class SessionNotFound(SessionError, KeyError):
    """No session with that id exists here."""

    def __init__(self, *, session_id: str) -> None:
        super().__init__(
            f"no session {session_id!r}; list the sessions to find its id",
            session_id=session_id,
        )

    def __str__(self) -> str:
        return str(self.args[0])


class ReplayDiverged(SessionError):
    """A stage re-executed from the log called out differently from the recorded run.

    Raised inside the stage at the call that differs, so it stops there; the
    replay reports it as the first divergent event.

    Attributes:
        kind: The kind of call the stage made (``"model"``, ``"tool:search"``...).
        reason: What differed.
    """

    def __init__(self, *, session_id: str, kind: str, reason: str) -> None:
        super().__init__(
            f"a re-executed stage of session {session_id!r} diverged at a {kind!r} call: "
            f"{reason}; the stage does not repeat what the recorded run did",
            session_id=session_id,
        )
        self.kind = kind
        self.reason = reason


class RecordedCallFailed(ArkhonError):
    """A call that raised in the recorded run, raised again in a replay.

    Replays raise the recorded exception's own class when it is importable and
    takes a message; otherwise this, carrying its name and message.

    Attributes:
        kind: The kind of call.
        error_type: The qualified name of the original exception's class.
    """

    def __init__(self, *, kind: str, error_type: str, message: str) -> None:
        super().__init__(f"recorded {kind!r} call failed with {error_type}: {message}")
        self.kind = kind
        self.error_type = error_type


class StoreError(ArkhonError):
    """The store failed, or refused what was asked; nothing committed was lost.

    Attributes:
        location: Where the store lives (a file path, or ``":memory:"``).
    """

    def __init__(self, message: str, *, location: str = "") -> None:
        super().__init__(message)
        self.location = location


class StoreCorrupt(StoreError):
    """The file is not an arkhon-rheo store, has another schema version, or is damaged.

    The file is never overwritten.
    """


class DuplicateEvent(StoreError):
    """An event's number is already taken in its session, or is not the next one.

    Attributes:
        session_id: The session.
        seq: The refused number.
    """

    def __init__(self, *, session_id: str, seq: int, expected: int, location: str = "") -> None:
        super().__init__(
            f"session {session_id!r} refused event #{seq}: the next number is #{expected} "
            "(an event is committed exactly once)",
            location=location,
        )
        self.session_id = session_id
        self.seq = seq


class UnserializablePatch(StoreError):
    """A patch holds a value the store cannot keep; it was refused before commit.

    Attributes:
        field: The field whose value could not be serialized.
    """

    def __init__(self, *, stage: str | None, field: str, reason: str) -> None:
        super().__init__(
            f"stage {stage!r} wrote a value to {field!r} that cannot be stored: {reason}; "
            "use JSON-friendly field types (pydantic models, str, numbers, lists)"
        )
        self.field = field


class UnrecordableCall(StoreError):
    """A recorded call's request or response cannot be kept as JSON; the stage fails.

    Attributes:
        kind: The kind of call.
    """

    def __init__(self, *, kind: str, what: str, reason: str) -> None:
        super().__init__(
            f"the {what} of a recorded {kind!r} call cannot be stored: {reason}; pass "
            "JSON-friendly requests, and returns= the response's type so it can be dumped"
        )
        self.kind = kind


class SessionLocked(StoreError):
    """Another owner holds the session's lease: one driver per session at a time.

    Attributes:
        session_id: The session.
        owner: Who holds it.
        expires_at: When the lease runs out unless renewed (seconds since the epoch).
    """

    def __init__(
        self,
        *,
        session_id: str,
        owner: str,
        expires_at: float,
        location: str = "",
        now: float | None = None,
    ) -> None:
        until = datetime.fromtimestamp(expires_at, UTC).isoformat(timespec="seconds")
        left = "" if now is None else f", in {max(0, math.ceil(expires_at - now))} s"
        parts = owner.split("/")
        who = f"{owner!r}"
        if len(parts) >= 3 and parts[1].isdigit():
            who = f"process {parts[1]} on host {parts[0]!r} (owner {owner!r})"
        super().__init__(
            f"session {session_id!r} is driven by {who}; its lease runs until "
            f"{until.replace('+00:00', 'Z')}{left} unless renewed. Wait for that session to "
            "end, or for the lease to run out if its process died on another host (an "
            "AgentSystem takes over at once the lease of a dead process on its own host)",
            location=location,
        )
        self.session_id = session_id
        self.owner = owner
        self.expires_at = expires_at
