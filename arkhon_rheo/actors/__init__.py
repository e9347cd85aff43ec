"""The generic actor runtime on anyio: actors, mailboxes, references, the system.

It knows nothing of agents; the session supervisor is built on it.
"""

from __future__ import annotations

from .._exports import publish
from ._actor import Actor as Actor
from ._actor import ActorContext as ActorContext
from ._actor import Directive as Directive
from ._actor import FailurePolicy as FailurePolicy
from ._actor import Termination as Termination
from ._actor import TerminationKind as TerminationKind
from ._cell import ActorState as ActorState
from ._mailbox import MailboxReceiveStream as MailboxReceiveStream
from ._mailbox import MailboxSendStream as MailboxSendStream
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._mailbox import open_mailbox as open_mailbox
from ._ref import ActorRef as ActorRef
from ._system import ActorSystem as ActorSystem
from ._system import SystemState as SystemState
from ._system import SystemStatistics as SystemStatistics

__all__ = [
    "Actor",
    "ActorContext",
    "ActorRef",
    "ActorState",
    "ActorSystem",
    "Directive",
    "FailurePolicy",
    "MailboxReceiveStream",
    "MailboxSendStream",
    "MailboxStatistics",
    "SystemState",
    "SystemStatistics",
    "Termination",
    "TerminationKind",
    "open_mailbox",
]


publish(__name__, __all__, globals())
del publish
