"""An ended session, once released, is freed by reference counting: no cyclic garbage.

Every ended session used to leave ~33 objects of cyclic garbage (its
supervisor's cell, reference and termination referred to one another, and the
session, its log and its state hung off them), so the cyclic GC, not reference
counting, freed each one: at scale the collector was the largest cost. Each
test runs its sessions with the collector off, so the sessions' parts that
``gc.collect()`` finds afterwards are what they left (none).
"""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.testing import ReferenceState, reference_machine
from tests.support.helpers import cyclic_garbage_of

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

SESSIONS = 20
#: What an ended session was made of (its supervisor's actor, its record, its log).
SESSION_PARTS = (
    "Session",
    "SessionHandle",
    "SessionSupervisor",
    "_SystemCell",
    "StageActor",
    "ActorRef",
    "Termination",
    "EventLog",
    "ReferenceState",
    "History",
    "MailboxSendStream",
    "MailboxReceiveStream",
    "LazyEvent",
)
#: One machine for every test: a machine's stage classes are cyclic, as classes are,
#: so a machine dropped during a test would show in its count.
MACHINE = reference_machine(name="garbage")


@pytest.mark.usefixtures("collector_off")
@pytest.mark.parametrize("stored", [False, True], ids=["memory", "sqlite"])
async def test_ended_sessions_leave_no_cyclic_garbage(tmp_path: Path, stored: bool) -> None:
    machine = MACHINE
    async with AgentSystem(path=tmp_path / "s.db" if stored else None) as system:
        warm = await system.start(machine, ReferenceState(cycles=2))  # first calls' caches
        await warm.result()
        system.forget(warm.session_id)
        del warm
        gc.collect()
        sessions: list[weakref.ref[object]] = []
        for _ in range(SESSIONS):
            handle = await system.start(machine, ReferenceState(cycles=3))
            result = await handle.result()
            assert result.ok
            sessions.append(weakref.ref(handle._session))
            system.forget(handle.session_id)  # released, as a service does once it is done
            del handle, result
        # Freed by reference counting as each was released, the collector being off:
        assert [session() for session in sessions] == [None] * SESSIONS
        assert cyclic_garbage_of(*SESSION_PARTS) == []
