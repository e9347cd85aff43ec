"""arkhon-rheo: a supervised actor runtime for LLM agents, on anyio.

This module is the facade: it re-exports the public names and has no side
effects (no logging set-up, no event loop, no threads).
"""

from __future__ import annotations

from ._errors import ActorError as ActorError
from ._errors import ActorStopped as ActorStopped
from ._errors import ArkhonError as ArkhonError
from ._errors import AskTimeout as AskTimeout
from ._errors import ConfigurationError as ConfigurationError
from ._errors import MailboxClosed as MailboxClosed
from ._errors import MailboxError as MailboxError
from ._errors import MailboxFull as MailboxFull
from ._errors import SystemNotRunning as SystemNotRunning
from ._exports import publish
from .actors import Actor as Actor
from .actors import ActorRef as ActorRef
from .actors import ActorSystem as ActorSystem
from .actors import Termination as Termination
from .actors import TerminationKind as TerminationKind

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ActorError",
    "ActorRef",
    "ActorStopped",
    "ActorSystem",
    "ArkhonError",
    "AskTimeout",
    "ConfigurationError",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "SystemNotRunning",
    "Termination",
    "TerminationKind",
]

publish(__name__, __all__, globals())
del publish
