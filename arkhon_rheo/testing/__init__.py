"""Public test doubles and fault injection: scripted models, stores, seeded fault plans.

Like httpx's ``MockTransport``, the doubles implement the real interfaces, so
the code under test runs unchanged; the library's own tests, examples and
benches use them too: `reference_machine` (a small deterministic loop over
`ReferenceState`), `ScriptedModel`, `FaultyStore` (a store that fails the
calls you name) `EventCapture` (a listener that keeps every committed
event) and `run_machine` (run one session to its end; its result and events).
`crash_loop` kills your agent's process at random commits and checks that
nothing it was told was stored is lost. `StoreConformance` is the behaviour
every store must have, as a pytest class your own store's tests subclass
(imported on first use: it needs pytest). `start_postgres` starts a
throwaway PostgreSQL server from the system's binaries (`find_postgres`), for
tests and benches of the PostgreSQL store.
"""

from __future__ import annotations

import typing

from .._errors import CrashRunFailed as CrashRunFailed
from .._exports import publish as _publish
from ._asserts import assert_all_ended as assert_all_ended
from ._asserts import assert_none_hung as assert_none_hung
from ._asserts import assert_nothing_lost as assert_nothing_lost
from ._asserts import assert_replay_verifies as assert_replay_verifies
from ._capture import EventCapture as EventCapture
from ._chaos import ChaosReport as ChaosReport
from ._chaos import chaos_run as chaos_run
from ._chaos import fault_class as fault_class
from ._clock import VirtualClock as VirtualClock
from ._crash import crash_loop as crash_loop
from ._crash_report import CrashReport as CrashReport
from ._crash_report import LostCommit as LostCommit
from ._fault_rules import FaultCall as FaultCall
from ._fault_rules import FaultKind as FaultKind
from ._fault_rules import FaultRule as FaultRule
from ._fault_rules import InjectedFault as InjectedFault
from ._faults import FaultPlan as FaultPlan
from ._faults import FaultSchedule as FaultSchedule
from ._faulty_store import FaultyStore as FaultyStore
from ._faulty_store import StoreCall as StoreCall
from ._postgres import PostgresServer as PostgresServer
from ._postgres import find_postgres as find_postgres
from ._postgres import start_postgres as start_postgres
from ._reference import ReferenceState as ReferenceState
from ._reference import ReferenceStep as ReferenceStep
from ._reference import reference_machine as reference_machine
from ._run import MachineRun as MachineRun
from ._run import run_machine as run_machine
from ._scripted import Chunks as Chunks
from ._scripted import Delay as Delay
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptedRequest as ScriptedRequest
from ._scripted import Step as Step

if typing.TYPE_CHECKING:
    from ._conformance import StoreConformance as StoreConformance

__all__ = [
    "ChaosReport",
    "Chunks",
    "CrashReport",
    "CrashRunFailed",
    "Delay",
    "EventCapture",
    "FaultCall",
    "FaultKind",
    "FaultPlan",
    "FaultRule",
    "FaultSchedule",
    "FaultyStore",
    "InjectedFault",
    "LostCommit",
    "MachineRun",
    "PostgresServer",
    "ReferenceState",
    "ReferenceStep",
    "ScriptedModel",
    "ScriptedRequest",
    "Step",
    "StoreCall",
    "StoreConformance",
    "VirtualClock",
    "assert_all_ended",
    "assert_none_hung",
    "assert_nothing_lost",
    "assert_replay_verifies",
    "chaos_run",
    "crash_loop",
    "fault_class",
    "find_postgres",
    "reference_machine",
    "run_machine",
    "start_postgres",
]

#: The names imported on first use (they need pytest, which the library does not).
_LAZY = {"StoreConformance": "._conformance"}

_publish(__name__, [name for name in __all__ if name not in _LAZY], globals())


def __getattr__(name: str) -> object:
    """Import `StoreConformance` on first use, so the rest of the package needs no pytest."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    try:
        module = importlib.import_module(_LAZY[name], __name__)
    except ModuleNotFoundError as exc:
        if exc.name != "pytest":
            raise
        raise ImportError(
            f"arkhon_rheo.testing.{name} is a pytest test class: install pytest to use it"
        ) from exc
    value = getattr(module, name)
    _publish(__name__, [name], {name: value})
    globals()[name] = value
    return value
