"""Public test doubles and harnesses: a scripted model, a crash loop (more to come).

Like httpx's ``MockTransport``, the doubles implement the real interfaces, so
the code under test runs unchanged; the library's own tests use them too.
`crash_loop` kills your agent's process at random commits and checks that
nothing it was told was stored is lost.
"""

from __future__ import annotations

from .._exports import publish
from ._crash import CrashReport as CrashReport
from ._crash import CrashRunFailed as CrashRunFailed
from ._crash import LostCommit as LostCommit
from ._crash import crash_loop as crash_loop
from ._scripted import Chunks as Chunks
from ._scripted import Delay as Delay
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptedRequest as ScriptedRequest
from ._scripted import Step as Step

__all__ = [
    "Chunks",
    "CrashReport",
    "CrashRunFailed",
    "Delay",
    "LostCommit",
    "ScriptedModel",
    "ScriptedRequest",
    "Step",
    "crash_loop",
]

publish(__name__, __all__, globals())
del publish
