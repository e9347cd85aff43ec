"""Sessions, replays and the store."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from ._base import ArkhonError

__all__ = [
    "DuplicateEvent",
    "InboxFull",
    "LeaseLost",
    "RecordedCallFailed",
    "ReplayDiverged",
    "SessionError",
    "SessionLocked",
    "SessionNotFound",
    "SessionsDamaged",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "StoreUpgrading",
    "UnrecordableCall",
    "UnserializablePatch",
]


class SessionError(ArkhonError):
    """A session could not be started, found or driven.

    Attributes:
        session_id: The session concerned.
    """

    def __init__(self, message: str, *, session_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id


class SessionBusy(SessionError):
    """The session is in use in this system: running here, or being started or changed.

    Wait for the other call (or cancel the running session) and try again. A
    session another process drives raises `SessionLocked` instead. A message
    sent with ``on_busy="reject"`` to a session busy with a turn (anywhere)
    raises it too, having stored nothing; a message is never refused for being
    busy otherwise (it queues).
    """


class MessageRefused(SessionError):
    """A message sent to a session was refused: nothing was stored.

    Its kind is not one the session's machine accepts, its payload fails that
    kind's validation, or the session has ended. Fix the message (or send it to
    a session that takes it) and send it again.
    """


class NoReply(SessionError):
    """An ask got no reply to its message: it timed out, or the session ended first.

    The message stays stored (asking again with the same ``message_id`` waits
    for the same reply, and stores nothing twice).

    Attributes:
        session_id: The session.
        message_id: The message asked.
        timed_out: Whether the wait ran out of time (else the session ended
            before it applied the message, which it never will).
    """

    def __init__(self, message: str, *, session_id: str, message_id: str, timed_out: bool) -> None:
        super().__init__(message, session_id=session_id)
        self.message_id = message_id
        self.timed_out = timed_out


class SessionNotFound(SessionError, KeyError):
    """No session with that id exists here."""

    def __init__(self, *, session_id: str) -> None:
        super().__init__(
            f"no session {session_id!r}; list the sessions to find its id",
            session_id=session_id,
        )

    def __str__(self) -> str:
        return str(self.args[0])


class PoisonSession(SessionError):
    """A session was claimed too many times in a row without a commit: it is failed.

    Its step keeps killing the process that runs it (``os._exit``, a signal,
    the memory killer), so every claim ran it again and lost it again. A
    `Worker` past its ``max_claims_without_progress`` records a ``FAILURE``
    event (error type ``PoisonSession``, naming the count and the stage in
    flight) instead, and the session ends failed: fork it or roll it back to
    try again.

    Attributes:
        claims: How many claims in a row ended without a commit.
        stage: The stage that was in flight (``None`` if none was).
    """

    def __init__(self, *, session_id: str, claims: int, stage: str | None) -> None:
        where = f"in stage {stage!r}" if stage is not None else "between stages"
        super().__init__(
            f"session {session_id!r} was claimed {claims} times in a row without a "
            f"commit ({where}): its step keeps losing the process that runs it, so it "
            "is failed instead of run again; fork it or roll it back to try again",
            session_id=session_id,
        )
        self.claims = claims
        self.stage = stage


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


class StoreUnavailable(StoreError):
    """The store could not be reached, or dropped the connection, mid-call.

    PostgreSQL ended the connection (a restart, an administrator, its
    idle-in-transaction timeout on a starved client) or cannot be reached. A
    write that met it may or may not have been committed; nothing committed is
    lost. A session whose commit meets it is not failed: its run stops where it
    is, writing nothing more, with its record left ``"running"`` and its lease
    given up (or left to run out), and a worker (or `AgentSystem.resume`) goes on
    from its last commit.
    """


class StoreUpgrading(StoreError):
    """Another process is upgrading the store file's schema, and it did not finish in time.

    A file of an older schema version is upgraded in place, in one transaction,
    by the first process that opens it; one that opens it meanwhile waits for
    that upgrade, up to its ``upgrade_timeout`` (`SQLiteStore`), and then opens
    the upgraded file. Past that bound it raises this; the file is left to the
    upgrading process. Open the store again once that process has opened it, or
    give the others a longer ``upgrade_timeout``.

    Attributes:
        version: The file's schema version as this process found it.
        waited: How long this process waited, in seconds.
    """

    def __init__(self, *, location: str, version: int, waited: float) -> None:
        super().__init__(
            f"another process is upgrading the schema of the store {location} (version "
            f"{version}, older than this code's) and holds the file's write lock: this "
            f"process waited {waited:g} s (its upgrade_timeout) for the upgrade to finish. "
            "Open the store again once that process has opened it (a large inbox takes a "
            "while to rebuild), or give SQLiteStore a longer upgrade_timeout",
            location=location,
        )
        self.version = version
        self.waited = waited


class StoreCorrupt(StoreError):
    """The file is not an arkhon-rheo store, has another schema version, or is damaged.

    The file is never overwritten. A damaged row of one session (its record,
    snapshot or an event, not JSON or not of its shape) names that session; the
    store's other sessions read as before.

    Attributes:
        session_id: The session whose stored rows are damaged (``None``: the
            store as a whole is at fault).
    """

    def __init__(self, message: str, *, location: str = "", session_id: str | None = None) -> None:
        super().__init__(message, location=location)
        self.session_id = session_id


class SessionsDamaged(StoreCorrupt):
    """The records of some sessions are damaged; `Store.sessions` lists the others here.

    A listing (``arkhon-rheo sessions``, ``check``) reports each damaged one and
    goes on with ``records``.

    Attributes:
        records: Every other session's record (a `SessionRecord`), oldest first.
        damaged: Each damaged session's id, its machine's name as stored, and
            what is wrong with its record, oldest first.
        session_id: The first damaged session.
    """

    def __init__(
        self,
        records: tuple[Any, ...],
        damaged: tuple[tuple[str, str, str], ...],
        *,
        location: str = "",
    ) -> None:
        names = ", ".join(repr(session_id) for session_id, _, _ in damaged)
        super().__init__(
            f"{len(damaged)} session record(s) of the store do not read ({names}): "
            f"{damaged[0][2]} (each is named in .damaged; the other {len(records)} "
            "session(s) are in .records)",
            location=location,
            session_id=damaged[0][0],
        )
        self.records = records
        self.damaged = damaged


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


class LeaseLost(StoreError):
    """A write carried a lease its owner no longer holds: another owner took the session.

    Nothing of the write was stored. The process that made it must stop driving
    the session at once (no retry, no further writes): its successor drives it
    now, from the last commit it saw. (A lease that ran out but that no other
    owner took still lets its owner commit.)

    Attributes:
        session_id: The session.
        owner: The owner the write was made for.
        holder: Who holds the lease now (``None``: nobody; another owner took it
            since, and gave it up).
    """

    def __init__(
        self, *, session_id: str, owner: str, holder: str | None, location: str = ""
    ) -> None:
        now = "nobody holds it now" if holder is None else f"{holder!r} holds it now"
        if holder == owner:
            now = "it was taken again since, under a newer fencing token"
        super().__init__(
            f"session {session_id!r}: {owner!r} lost its lease ({now}); nothing of this write "
            "was stored, and this process must stop driving the session: its new owner "
            "drives it from the last commit",
            location=location,
        )
        self.session_id = session_id
        self.owner = owner
        self.holder = holder


class InboxFull(StoreError):
    """A session's inbox holds as many pending messages as it may; the message was not stored.

    Attributes:
        session_id: The session.
        capacity: How many pending messages its inbox may hold.
    """

    def __init__(self, *, session_id: str, capacity: int, location: str = "") -> None:
        super().__init__(
            f"session {session_id!r} has {capacity} messages waiting in its inbox, as many as "
            f"it may hold; this message was refused and nothing was stored. Send it again once "
            f"the session has taken some of its messages, or raise inbox_capacity",
            location=location,
        )
        self.session_id = session_id
        self.capacity = capacity
