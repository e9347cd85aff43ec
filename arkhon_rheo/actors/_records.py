"""The plain records of an actor's life: where it is, how it ended, what a crash makes of it.

The bottom of the actor runtime: it imports nothing else of it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["ActorState", "Directive", "FailurePolicy", "TerminationKind"]


class ActorState(enum.Enum):
    """Where an actor is in its life."""

    #: Its task runs ``on_start``; messages queue up but are not handled yet.
    STARTING = "starting"
    #: It handles messages.
    RUNNING = "running"
    #: It was asked to stop: it refuses new messages and finishes the queued ones.
    STOPPING = "stopping"
    #: It has ended; see ``ActorRef.termination``.
    STOPPED = "stopped"


class TerminationKind(enum.Enum):
    """Why an actor ended."""

    #: It was asked to stop and finished the messages queued before that.
    NORMAL = "normal"
    #: Its handler or one of its hooks raised; ``Termination.error`` holds the exception.
    CRASHED = "crashed"
    #: It was cancelled (``ActorRef.cancel()`` or a forced system shutdown).
    CANCELLED = "cancelled"


class Directive(enum.Enum):
    """What to do with an actor whose handler raised an ``Exception``.

    Cancellation is never offered to a failure policy: it always propagates.
    """

    #: End the actor, with the exception as its termination reason.
    STOP = "stop"
    #: Replace the instance by a fresh one from its factory and go on with the
    #: queued messages. The new instance's `Actor.on_restart` runs first.
    RESTART = "restart"


#: Decides, from the exception a handler raised, what becomes of the actor.
FailurePolicy = Callable[[Exception], Directive]
