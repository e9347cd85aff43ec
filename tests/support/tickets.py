"""A ticket machine that receives messages and sets a timer, for the inbox tests and their child.

`tests/system/test_inbox.py` drives it in process; `tests/support/inbox_child.py`
runs it in a child process that the crash tests kill. A `Hold` message makes
the stage applying it wait for ever once `HOLD` is set (the child sets it), so
a child can be killed while a message is being applied.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel

from arkhon_rheo import AgentState, Machine, Patch, StateView, stage
from arkhon_rheo.protocols import Receive, schedule

#: Set (in a child process): a `Hold` message's step waits for ever.
HOLD: dict[str, Any] = {"forever": False, "inside": None}


class Hold(BaseModel):
    text: str


class Phase(enum.Enum):
    NEW = "new"
    OPEN = "open"
    REVIEW = "review"
    CLOSED = "closed"
    FAILED = "failed"


class Ticket(AgentState):
    lifecycle: Phase = Phase.NEW
    title: str = "printer on fire"
    notes: tuple[str, ...] = ()
    closed: bool = False


class Note(BaseModel):
    text: str


class Remind(BaseModel):
    kind: ClassVar[str] = "remind"
    why: str


class CloseTicket(BaseModel):
    pass


class Escalate(BaseModel):
    level: int


@stage(reads={"title"}, writes={"notes"}, next=Phase.OPEN)
async def opened(view: StateView[Ticket]) -> Patch:
    schedule(Remind(why="check in"), after=3600)
    return Patch(notes=(f"opened: {view.title}",))


class Triage(
    Receive[Ticket],
    reads={"notes"},
    writes={"notes", "closed"},
    accepts=(Note, Remind, CloseTicket, Hold),
):
    async def apply(self, view: StateView[Ticket], message: Any) -> Patch:
        if isinstance(message, CloseTicket):
            return Patch(closed=True)
        if isinstance(message, Hold):
            if HOLD["forever"]:
                inside = HOLD["inside"]
                if isinstance(inside, anyio.Event):
                    inside.set()
                await anyio.sleep_forever()
            return Patch(notes=(*view.notes, f"held: {message.text}"))
        text = message.text if isinstance(message, Note) else f"reminder: {message.why}"
        return Patch(notes=(*view.notes, text))

    def next(self, state: Ticket) -> Phase:
        return Phase.CLOSED if state.closed else Phase.OPEN


class Review(Receive[Ticket], reads={"notes"}, writes={"notes"}, accepts=(Escalate,)):
    async def apply(self, view: StateView[Ticket], message: Escalate) -> Patch:
        return Patch(notes=(*view.notes, f"escalated to {message.level}"))

    def next(self, state: Ticket) -> Phase:
        return Phase.OPEN


TICKETS = Machine(
    name="tickets",
    state_type=Ticket,
    initial=Phase.NEW,
    transitions={
        Phase.NEW: {Phase.OPEN},
        Phase.OPEN: {Phase.OPEN, Phase.CLOSED, Phase.REVIEW},
        Phase.REVIEW: {Phase.OPEN},
    },
    stages={Phase.NEW: opened, Phase.OPEN: Triage, Phase.REVIEW: Review},
    terminal={Phase.CLOSED, Phase.FAILED},
    failed=Phase.FAILED,
)
