"""A session's durable inbox: the requests that write it, and what a batch knows of it.

Messages posted to a session are numbered per session from 1 (their *position*)
and kept, applied or not: a message id is unique per session, so posting one
again changes nothing. A message is *pending* until an append marks it applied
by one of its events. Both stores plan inbox writes with `._plan.plan`, given
what the batch knows of each inbox it touches (`Inbox`), so they behave the
same; the SQLite store reads that knowledge and writes the planned rows in the
batch's transaction (`._inbox_sql`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._codec import MessageRow

__all__ = ["Inbox", "NewRow", "Park", "Post", "reads_pending"]

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
    wake time, and releases ``owner``'s lease if it holds it. A park naming an
    ``owner`` is fenced as an append is (see `._fence`): refused with
    `LeaseLost` unless ``owner`` holds the lease (under ``token``, where the
    store keeps tokens), so a driver paused past its lease cannot park a
    session its successor has moved on (or finished) meanwhile.
    """

    session_id: str
    owner: str | None
    status: str
    waiting: str | None
    accepts: frozenset[str]
    now: float
    #: The fencing token the store got when ``owner`` took the lease, if known.
    token: int | None = None


@dataclass(slots=True)
class Inbox:
    """What a batch knows of one session's inbox.

    Attributes:
        last_position: The highest position taken (0: none).
        pending: The rows of the messages not applied yet, by position.
        ids: The rows of the message ids the batch posts, for those the inbox
            has already (pending or applied), by message id.
        count: How many messages are pending, where only that is known (a batch
            that only posts to the inbox: its rows, payloads and all, are not
            read); ``None``: ``pending`` holds them all.
    """

    last_position: int
    pending: dict[int, MessageRow]
    ids: dict[str, MessageRow]
    count: int | None = None

    def copy(self) -> Inbox:
        """A copy the batch may change, leaving this one as it is."""
        return Inbox(self.last_position, dict(self.pending), dict(self.ids), self.count)

    def pending_count(self) -> int:
        """How many messages are pending (what a post's capacity check counts)."""
        return len(self.pending) if self.count is None else self.count


def reads_pending(request: object) -> bool:
    """Whether planning ``request`` needs its session's pending messages, not just their count.

    A park looks at their kinds and due times, an append at the one it applies;
    a post, or an append that only posts timers, needs their count only.
    """
    return isinstance(request, Park) or getattr(request, "applied", None) is not None
