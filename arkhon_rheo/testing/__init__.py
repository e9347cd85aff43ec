"""Public test doubles: models that answer from a script (more fakes to come).

Like httpx's ``MockTransport``, they implement the real interfaces, so the
code under test runs unchanged; the library's own tests use them too.
"""

from __future__ import annotations

from .._exports import publish
from ._scripted import Chunks as Chunks
from ._scripted import Delay as Delay
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptedRequest as ScriptedRequest
from ._scripted import Step as Step

__all__ = ["Chunks", "Delay", "ScriptedModel", "ScriptedRequest", "Step"]

publish(__name__, __all__, globals())
del publish
