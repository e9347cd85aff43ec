"""One session's inbox as `MemoryStore` keeps it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._inbox import Inbox

if TYPE_CHECKING:
    from ._codec import MessageRow

__all__ = ["Messages"]


class Messages:
    """One session's inbox in memory: every row by position, and which are pending."""

    __slots__ = ("ids", "pending", "rows")

    def __init__(self) -> None:
        self.rows: list[MessageRow] = []
        #: Position of each message id.
        self.ids: dict[str, int] = {}
        #: The positions of the pending messages (an ordered set).
        self.pending: dict[int, None] = {}

    def known(self, message_ids: list[str]) -> Inbox:
        """What a plan needs to know of it, for a request posting ``message_ids``."""
        rows = self.rows
        pending = {position: rows[position - 1] for position in self.pending}
        ids = {mid: rows[self.ids[mid] - 1] for mid in message_ids if mid in self.ids}
        return Inbox(len(rows), pending, ids)
