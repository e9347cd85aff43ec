from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import ExitReason
from arkhon_rheo.protocols import Lifecycle as L
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.testing import ReferenceState, reference_machine, run_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

CYCLE = [L.ACTING, L.OBSERVING, L.THINKING]


async def test_run_machine_in_memory_keeps_the_result_and_every_event() -> None:
    done = await run_machine(reference_machine(), ReferenceState(cycles=2), session_id="r")
    assert done.result.exit_reason is ExitReason.FINISHED
    assert done.result.session_id == "r"
    assert done.state is done.result.state
    assert len(done.events) == done.result.steps
    assert [event.seq for event in done.events] == list(range(1, done.result.steps + 1))
    assert done.path[-1] is L.FINISHED
    assert done.path.count(L.OBSERVING) == 2


async def test_run_machine_reads_the_history_back_from_a_store(tmp_path: Path) -> None:
    on_file = await run_machine(reference_machine(), ReferenceState(), path=tmp_path / "r.db")
    async with MemoryStore() as store:
        in_store = await run_machine(reference_machine(), ReferenceState(), store=store)
        assert len(await store.history(in_store.result.session_id)) == len(in_store.events)
    in_memory = await run_machine(reference_machine(), ReferenceState())
    assert on_file.path == in_store.path == in_memory.path
    assert on_file.state.steps == in_memory.state.steps
