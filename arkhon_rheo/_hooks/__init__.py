"""The hooks of a running stage: the context variables the layers read while it runs.

Four things are found, while a stage runs, through a context variable its task
holds: the fault injector a test installed and the session it runs for
(`current_injector`, `current_session`), the recorder of its model and tool
calls (`RECORDER`, `call_site`, `current_step`), the scope its partial output
goes to (`STAGE_SCOPE`) and its machine's resources (`current_resources`).
The supervisor (and the agent system, the test kit) sets them; a store's
write, a `Toolbox` call, the ReAct engine's model turn and the public entry
points of `arkhon_rheo.protocols` (`record_call`, `emit`, `schedule`) read them.

Why a package of its own: these are running code, so they are not contracts
(``protocols`` keeps those); their readers sit in layers that know nothing of
each other (``store``, ``tools``, ``react``, ``protocols`` itself), so they
cannot sit beside any one of them, nor in ``session``, which those layers
may not import. This package lies below ``protocols`` and imports nothing of
the package but the ``_errors`` leaf. It is not a leaf: ``tests/test_layering.py``
lists the layers that may import it (``ALLOWED``), and they import this
namespace, never its private modules.
"""

from __future__ import annotations

from ._calls import RECORDER as RECORDER
from ._calls import Recorder as Recorder
from ._calls import aclose_iterator as aclose_iterator
from ._calls import call_site as call_site
from ._calls import current_step as current_step
from ._calls import record_plain_call as record_plain_call
from ._faults import FaultInjector as FaultInjector
from ._faults import current_injector as current_injector
from ._faults import current_session as current_session
from ._faults import enter_session as enter_session
from ._faults import install as install
from ._faults import installed as installed
from ._faults import uninstall as uninstall
from ._scopes import NO_RESOURCES as NO_RESOURCES
from ._scopes import STAGE_SCOPE as STAGE_SCOPE
from ._scopes import OutputScope as OutputScope
from ._scopes import current_resources as current_resources
from ._scopes import resources_scope as resources_scope

__all__ = [
    "NO_RESOURCES",
    "RECORDER",
    "STAGE_SCOPE",
    "FaultInjector",
    "OutputScope",
    "Recorder",
    "aclose_iterator",
    "call_site",
    "current_injector",
    "current_resources",
    "current_session",
    "current_step",
    "enter_session",
    "install",
    "installed",
    "record_plain_call",
    "resources_scope",
    "uninstall",
]
