"""Session supervision: the live supervisor of one session.

The session's record, its stages (inline or as actors), the supervisor's step
and commit, failure classification, the restart policy, the recorder and
playback of a stage's calls, and the write of each commit to the store. It
builds on the pure core (`arkhon_rheo.core`: the compiled machine, validation,
the codec, the digest, the fold), on `arkhon_rheo.actors` and on
`arkhon_rheo.protocols`.
"""

from __future__ import annotations

from .._exports import publish
from ._policy import Backoff as Backoff
from ._policy import Classifier as Classifier
from ._policy import RestartIntensity as RestartIntensity
from ._policy import RestartStrategy as RestartStrategy
from ._policy import RestartWindow as RestartWindow
from ._record import ExitReason as ExitReason
from ._record import StageMode as StageMode

__all__ = [
    "Backoff",
    "Classifier",
    "ExitReason",
    "RestartIntensity",
    "RestartStrategy",
    "RestartWindow",
    "StageMode",
]

publish(__name__, __all__, globals())
del publish
