"""An actor's end: recorded, its mail dropped, its ``on_stop`` run, its watchers told.

A cell's ``_finish`` is `finish`: it runs once per actor, whatever ended it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ActorStopped
from .._log import get_logger
from ._behaviour import Notice
from ._records import ActorState, TerminationKind
from ._ref import Ask, Termination

if TYPE_CHECKING:
    from ._behaviour import Behaviour

__all__ = ["finish"]

_logger = get_logger("arkhon_rheo.actors")


async def finish(
    cell: Any,  # a `Cell` (which imports this module)
    actor: Behaviour[Any, Any] | None,
    kind: TerminationKind,
    error: BaseException | None,
) -> None:
    """Record ``cell``'s end, fail pending asks, run ``on_stop``, tell the watchers."""
    cell.state = ActorState.STOPPED
    assert cell.ref is not None  # still ours: it is let go of once the actor has ended
    cell.ended = (kind, error)
    cell._actor = None  # the instance refers to its cell (its context): no cycle kept
    cell._context = None
    termination = Termination(cell.ref, kind, error)
    if cell.tx is not None:
        cell.tx.close()
    for item in cell.rx.close() if cell.rx is not None else ():
        if type(item) is Notice:
            continue
        if type(item) is Ask:
            item.set_error(ActorStopped(actor=cell.name, detail=f"{kind.value} before replying"))
        cell._host.dead_letters += 1
        _logger.warning(
            "dead_letter",
            actor=cell.name,
            state="stopped",
            message_type=type(item).__name__,
        )
    if kind is TerminationKind.CRASHED:
        _logger.error("actor_crashed", actor=cell.name, error=repr(error))
    try:
        if actor is not None and actor._on_stop_bounded:
            await actor.on_stop(termination)  # no timer: the hook bounds its own waits
        elif actor is not None:
            with anyio.move_on_after(cell._host.shutdown_timeout):
                await actor.on_stop(termination)
    except Exception as exc:
        _logger.error("actor_on_stop_failed", actor=cell.name, error=repr(exc))
    finally:
        cell._host.cells.pop(cell, None)
        cell.task = None  # an ended actor has nothing to cancel: not kept for its ref
        cell.active = False
        cell.ref = None  # see the class: no cycle through the reference once ended
        done, cell._done = cell._done, None
        if done is not None:
            done.set()
        watchers, cell._watchers = cell._watchers or (), None
        for watcher in watchers:
            if watcher._watching is not None:
                watcher._watching.pop(cell, None)
            watcher.notify(termination)
        watching, cell._watching = cell._watching or (), None
        for target in watching:  # ended watchers must not stay referenced
            if target._watchers is not None:
                target._watchers.pop(cell, None)
