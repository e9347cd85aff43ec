"""`Plan`: the rows a batch of write requests makes, as `plan` decides them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._codec import EventRow, MessageRow, SessionRow, Snapshot
    from ._effects import EffectRow
    from ._fence import Lease

__all__ = ["Plan"]


class Plan:
    """The rows a batch writes, and the error (or ``None``) of each request.

    (A plain class: made once per batch and per memory-store write, it builds its
    empty lists and dicts from literals, faster than a dataclass's factories.)

    Attributes:
        created: New session rows.
        events: Event rows, in order.
        snapshots: ``(session_id, seq, state)`` rows.
        updated: The final ``(last_seq, status)`` of every session the batch touched.
        leases: The final lease of every session whose lease the batch changed
            (``None``: released).
        inbox: New inbox rows, in order.
        applied: ``(applied_seq, session_id, position)`` of the inbox messages applied.
        waits: The final ``(waiting, wake_at, accepts)`` of every session whose
            status the batch set (``(None, None, None)`` unless it parked; ``accepts``:
            the message kinds it parked for, as a JSON list).
        nudges: By session, then by message kind: the due time the messages posted
            to it bring its ``wake_at`` down to (if earlier), if it is waiting once
            the batch is written and parked accepting that kind.
        effects: The final row of every effect-ledger entry the batch begins or
            finishes, by ``(session_id, key)``.
        errors: One entry per request: why it was refused, or ``None``.
        results: One entry per request: what it returns (a post's ``(row, new)``,
            whether a park parked), or ``None``.
        appended: How many events the batch writes.
    """

    __slots__ = (
        "appended",
        "applied",
        "created",
        "effects",
        "errors",
        "events",
        "inbox",
        "leases",
        "nudges",
        "results",
        "snapshots",
        "updated",
        "waits",
    )

    def __init__(self) -> None:
        self.created: list[SessionRow] = []
        self.events: list[EventRow] = []
        self.snapshots: list[tuple[str, int, Snapshot]] = []
        self.updated: dict[str, tuple[int, str]] = {}
        self.leases: dict[str, Lease | None] = {}
        self.inbox: list[MessageRow] = []
        self.applied: list[tuple[int, str, int]] = []
        self.waits: dict[str, tuple[str | None, float | None, str | None]] = {}
        self.nudges: dict[str, dict[str, float]] = {}
        self.effects: dict[tuple[str, str], EffectRow] = {}
        self.errors: list[Exception | None] = []
        self.results: list[Any] = []
        self.appended = 0
