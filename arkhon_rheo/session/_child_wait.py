"""A session that waits on its child session: it parks, and the child's end wakes it.

A subgraph stage (``arkhon_rheo.graphs``) whose child session stops without
ending (paused at a gate, or parked waiting for a message) raises `ChildWaits`.
The supervisor then parks its own session (`wait_for_child`), durably: its
record says ``"waiting"``, on which child, and it accepts one message kind only,
the child's own (`child_kind`). A decision or a message sent to the child by
its id runs the child on; when the child ends, the end of its run posts that
message to the parent's inbox (`tell_parent`), which wakes the parent wherever
its machine is served, as any message does. The parent's step then runs again:
it finds the child ended, and its commit marks the message applied
(`take_child_end`), exactly once, as any inbox message is applied.

The park and the post are each one store transaction, and the park refuses
while the child's message is due, so a child that ends between its parent's
look and its park still wakes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._log import get_logger
from ..protocols import NewMessage
from ._record import ExitReason

if TYPE_CHECKING:
    from ..protocols import AgentState, Store
    from ._record import Session

__all__ = [
    "ChildWaits",
    "applied_info",
    "child_kind",
    "post_child_end",
    "take_child_end",
    "tell_parent",
    "wait_for_child",
]

_logger = get_logger("arkhon_rheo.supervision")

#: The room the message that wakes a parent always has in its inbox: the
#: parent cannot take its other messages before its child ends.
_ROOM = 2**31

#: The exit reasons of a child run whose end its parent must learn of.
_ENDED = frozenset({ExitReason.FINISHED, ExitReason.FAILED, ExitReason.MAX_STEPS})


def child_kind(child_id: str) -> str:
    """The message kind that wakes the parent of child session ``child_id``: its own only."""
    return f"arkhon.child:{child_id}"


def _message_id(child_id: str) -> str:
    return f"child-ended:{child_id}"


class ChildWaits(Exception):
    """Raised by a stage whose child session stopped without ending: its session parks.

    Never a failure: the supervisor parks the session until the child ends
    (see the module's doc), then runs the step again.

    Attributes:
        child_id: The child session.
        status: How it waits: ``"paused"`` (at a gate) or ``"waiting"`` (for a message).
    """

    def __init__(self, child_id: str, status: str) -> None:
        super().__init__(f"child session {child_id!r} is {status}")
        self.child_id = child_id
        self.status = status


async def wait_for_child(
    session: Session, state: AgentState, stage: str, waits: ChildWaits
) -> bool:
    """Park ``session`` in ``state`` until its child ends; return whether it parked.

    ``False``: the child ended meanwhile (its message is due): the step runs
    again, past the gate it had passed.
    """
    persistence = session.persistence
    assert persistence is not None  # the stage raises `ChildWaits` only with a store
    kind = child_kind(waits.child_id)
    parked = await persistence.store.park(
        session.session_id,
        persistence.owner,
        status=ExitReason.WAITING.value,
        waiting={
            "state": state.lifecycle.name,
            "stage": stage,
            "child": waits.child_id,
            "child_status": waits.status,
            "accepts": [kind],
        },
        accepts=[kind],
        now=session.clock.now(),
    )
    if not parked:
        session.gates_passed = True  # the gate before this step let it through already
        return False
    session.finish(ExitReason.WAITING)
    _logger.info(
        "session_waits_on_child",
        session_id=session.session_id,
        child=waits.child_id,
        child_status=waits.status,
    )
    return True


async def tell_parent(session: Session) -> None:
    """Post the end of child ``session`` to its parent's inbox, if its parent may wait on it.

    Only for a run its parent does not await here (``session.tell_parent``):
    one a decision or a message launched.
    """
    link, persistence = session.link, session.persistence
    if not session.tell_parent or link is None or persistence is None:
        return
    if session.exit_reason not in _ENDED:
        return
    reason = session.exit_reason.value
    parent = str(link["session_id"])
    await post_child_end(persistence.store, parent, session.session_id, reason, session.clock.now())


async def post_child_end(
    store: Store, parent_id: str, child_id: str, exit_reason: str, now: float
) -> None:
    """Post the end of child ``child_id`` to parent ``parent_id``'s inbox (once: by its id).

    Errors are logged: the parent can still be resumed by hand.
    """
    payload = {"child": child_id, "exit_reason": exit_reason}
    message = NewMessage(_message_id(child_id), child_kind(child_id), payload, now)
    try:
        await store.post(parent_id, message, capacity=_ROOM)
    except Exception as exc:
        _logger.error("parent_not_told", session_id=child_id, error=repr(exc))


async def take_child_end(session: Session, child_id: str) -> None:
    """Have the step under way apply the message that told ``session`` of its child's end.

    Its next commit (the step's, or the failure it records) marks it applied.
    """
    persistence = session.persistence
    if persistence is None:
        return
    wanted = _message_id(child_id)
    for message in await persistence.store.pending(session.session_id):
        if message.message_id == wanted:
            session.applies = message
            return


def applied_info(session: Session) -> tuple[int | None, dict[str, Any]]:
    """The inbox position the next commit applies for a child's end, and what its event says."""
    message = session.applies
    if message is None:
        return None, {}
    return message.position, {"child_ended": dict(message.payload)}
