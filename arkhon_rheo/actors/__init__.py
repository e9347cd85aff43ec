"""The generic actor runtime on anyio: actors, mailboxes, references, the system.

It knows nothing of agents; the session supervisor is built on it.
"""

from __future__ import annotations

from .._exports import publish
from ._mailbox import MailboxReceiveStream as MailboxReceiveStream
from ._mailbox import MailboxSendStream as MailboxSendStream
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._mailbox import open_mailbox as open_mailbox
from ._records import ActorState as ActorState
from ._records import Directive as Directive
from ._records import FailurePolicy as FailurePolicy
from ._records import TerminationKind as TerminationKind
from ._ref import ActorRef as ActorRef
from ._ref import Termination as Termination
from ._system import Actor as Actor
from ._system import ActorContext as ActorContext
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
