"""Session supervision: patch validation, failure classification, restart policy.

Also the fold of a session's events (`fold`, `apply_event`), the check of a
stored log (`ReplayReport`), and the recorder and playback of a stage's calls
(`CallRecorder`, `CallPlayback`).

Built on `arkhon_rheo.actors` and `arkhon_rheo.protocols` only.
"""

from __future__ import annotations

from .._exports import publish
from ._codec import EventCodec as EventCodec
from ._digest import StateHasher as StateHasher
from ._fold import apply_event as apply_event
from ._fold import fold as fold
from ._policy import Backoff as Backoff
from ._policy import Classifier as Classifier
from ._policy import RestartIntensity as RestartIntensity
from ._policy import RestartStrategy as RestartStrategy
from ._policy import RestartWindow as RestartWindow
from ._record import ExitReason as ExitReason
from ._record import SessionConfig as SessionConfig
from ._record import StageMode as StageMode
from ._recording import CallPlayback as CallPlayback
from ._recording import CallRecorder as CallRecorder
from ._validate import PatchValidator as PatchValidator
from ._verify import Divergence as Divergence
from ._verify import ReplayReport as ReplayReport

__all__ = [
    "Backoff",
    "CallPlayback",
    "CallRecorder",
    "Classifier",
    "Divergence",
    "EventCodec",
    "ExitReason",
    "PatchValidator",
    "ReplayReport",
    "RestartIntensity",
    "RestartStrategy",
    "RestartWindow",
    "SessionConfig",
    "StageMode",
    "StateHasher",
    "apply_event",
    "fold",
]

publish(__name__, __all__, globals())
del publish
