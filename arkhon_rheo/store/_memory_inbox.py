"""One session's inbox as `MemoryStore` keeps it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._inbox import Inbox

if TYPE_CHECKING:
    from ._codec import MessageRow
    from ._plan import Plan

__all__ = ["Messages", "apply_inbox"]


class Messages:
    """One session's inbox in memory: every row by position, and which are pending."""

    __slots__ = ("ids", "pending", "rows")

    def __init__(self) -> None:
        self.rows: list[MessageRow] = []
        #: Position of each message id.
        self.ids: dict[str, int] = {}
        #: The positions of the pending messages (an ordered set).
        self.pending: dict[int, None] = {}

    def known(self, message_ids: list[str], *, rows_needed: bool = True) -> Inbox:
        """What a plan needs to know of it, for a request posting ``message_ids``.

        ``rows_needed``: the pending rows, not only their count (see `reads_pending`).
        """
        rows = self.rows
        ids = {mid: rows[self.ids[mid] - 1] for mid in message_ids if mid in self.ids}
        if not rows_needed:
            return Inbox(len(rows), {}, ids, len(self.pending))
        pending = {position: rows[position - 1] for position in self.pending}
        return Inbox(len(rows), pending, ids)


def apply_inbox(inboxes: dict[str, Messages], result: Plan) -> None:
    """Write a plan's new inbox rows and applied messages into ``inboxes``."""
    for row in result.inbox:
        box = inboxes.get(row[0])
        if box is None:
            box = inboxes[row[0]] = Messages()
        box.rows.append(row)
        box.ids[row[1]] = row[2]
        box.pending[row[2]] = None
    for seq, session_id, position in result.applied:
        box = inboxes[session_id]
        box.rows[position - 1] = (*box.rows[position - 1][:7], seq)
        del box.pending[position]
