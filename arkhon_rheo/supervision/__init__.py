"""Session supervision: how the supervisor that runs each session handles its failures.

The restart policy (`Backoff`, `RestartIntensity`, `RestartWindow`,
`RestartStrategy`), the classification of a stage's exceptions
(`Classifier`), how stages run (`StageMode`) and why a session ended
(`ExitReason`). The supervisor itself, its stages, the commit and the write to
the store live in `arkhon_rheo.session`, with the rest of the session; this is
their public namespace.
"""

from __future__ import annotations

from ..session import Backoff as Backoff
from ..session import Classifier as Classifier
from ..session import ExitReason as ExitReason
from ..session import RestartIntensity as RestartIntensity
from ..session import RestartStrategy as RestartStrategy
from ..session import RestartWindow as RestartWindow
from ..session import StageMode as StageMode

__all__ = [
    "Backoff",
    "Classifier",
    "ExitReason",
    "RestartIntensity",
    "RestartStrategy",
    "RestartWindow",
    "StageMode",
]
