"""A session's durable inbox: the requests that write it, and how a batch plans them.

Messages posted to a session are numbered per session from 1 (their *position*)
and kept, applied or not: a message id is unique per session, so posting one
again changes nothing. A message is *pending* until an append marks it applied
by one of its events. Both stores plan inbox writes with the functions here,
called by `._plan.plan` with what the batch knows of each inbox it touches
(`Inbox`), so they behave the same; the SQLite store reads that knowledge and
writes the planned rows in the batch's transaction (`._inbox_sql`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import InboxFull, StoreError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._codec import MessageRow
    from ._plan import Append, Lease, Plan

__all__ = [
    "Inbox",
    "NewRow",
    "Park",
    "Post",
    "apply_inbox",
    "check_applied",
    "park",
    "post",
]

#: A message an append posts: ``(message_id, kind, payload, posted_at, due_at)``,
#: the payload as JSON text.
NewRow = tuple[str, str, str, float, float]


@dataclass(slots=True)
class Post:
    """Store a message in a session's inbox, unless the inbox has its id already.

    Refused (`InboxFull`) if the inbox holds ``capacity`` pending messages.
    """

    session_id: str
    message: NewRow
    capacity: int


@dataclass(slots=True)
class Park:
    """Park a session unless a pending message of a kind in ``accepts`` is due at ``now``.

    Parking sets the session's status, what it waits for (JSON text) and its
    wake time, and releases ``owner``'s lease if it holds it.
    """

    session_id: str
    owner: str | None
    status: str
    waiting: str | None
    accepts: frozenset[str]
    now: float


@dataclass(slots=True)
class Inbox:
    """What a batch knows of one session's inbox.

    Attributes:
        last_position: The highest position taken (0: none).
        pending: The rows of the messages not applied yet, by position.
        ids: The rows of the message ids the batch posts, for those the inbox
            has already (pending or applied), by message id.
    """

    last_position: int
    pending: dict[int, MessageRow]
    ids: dict[str, MessageRow]

    def copy(self) -> Inbox:
        """A copy the batch may change, leaving this one as it is."""
        return Inbox(self.last_position, dict(self.pending), dict(self.ids))


def _add(box: Inbox, session_id: str, message: NewRow, out: Plan) -> MessageRow:
    position = box.last_position = box.last_position + 1
    message_id, kind, payload, posted_at, due_at = message
    row: MessageRow = (session_id, message_id, position, kind, payload, posted_at, due_at, None)
    box.pending[position] = box.ids[message_id] = row
    out.inbox.append(row)
    return row


def post(
    request: Post, current: tuple[int, str], box: Inbox, out: Plan, location: str
) -> InboxFull | None:
    """Plan a `Post` of an existing session: its result is ``(row, new)``.

    Refused (`InboxFull`) if the inbox has no room for a new message.
    """
    sid = request.session_id
    found = box.ids.get(request.message[0])
    if found is not None:
        out.results[-1] = (found, False)
        return None
    if len(box.pending) >= request.capacity:
        return InboxFull(session_id=sid, capacity=request.capacity, location=location)
    row = _add(box, sid, request.message, out)
    if current[1] == "waiting":
        # A store cannot tell which kinds the session accepts: it wakes at the
        # message's due time, and parks again if it does not take it.
        out.nudges[sid] = min(out.nudges.get(sid, math.inf), row[6])
    out.results[-1] = (row, True)
    return None


def park(
    request: Park,
    current: tuple[int, str],
    box: Inbox,
    held: dict[str, Lease],
    state: dict[str, tuple[int, str]],
    out: Plan,
) -> None:
    """Plan a `Park`: its result is whether the session parked (no accepted message was due)."""
    sid = request.session_id
    accepted = [row[6] for row in box.pending.values() if row[3] in request.accepts]
    if any(due <= request.now for due in accepted):
        out.results[-1] = False
        return
    state[sid] = out.updated[sid] = (current[0], request.status)
    out.waits[sid] = (request.waiting, min(accepted, default=None))
    out.nudges.pop(sid, None)
    lease = held.get(sid)
    if request.owner is not None and lease is not None and lease[0] == request.owner:
        del held[sid]
        out.leases[sid] = None
    out.results[-1] = True


def check_applied(request: Append, box: Inbox | None, location: str) -> StoreError | None:
    """Refuse an append whose message ``applied`` is not pending (applied already, or unknown)."""
    if request.applied is None or (box is not None and request.applied in box.pending):
        return None
    return StoreError(
        f"session {request.session_id!r} cannot apply inbox message #{request.applied}: it is "
        "applied already, or was never posted (a message is applied exactly once); nothing "
        "of this append was written",
        location=location,
    )


def apply_inbox(request: Append, box: Inbox, last_seq: int, out: Plan) -> None:
    """Mark the append's message applied by its last event, and post its messages."""
    sid = request.session_id
    if request.applied is not None:
        row = box.pending.pop(request.applied)
        box.ids[row[1]] = (*row[:7], last_seq)
        out.applied.append((last_seq, sid, request.applied))
    posts: Sequence[NewRow] = request.posts
    for message in posts:
        if message[0] not in box.ids:
            _add(box, sid, message, out)
