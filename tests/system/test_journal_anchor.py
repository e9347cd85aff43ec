"""A resume's anchor (the last event before it that is no resume) read from the load alone.

`Journal.last_seq` given the session as just loaded answers from the events
after its snapshot where they hold the answer, and reads the whole history
only where they do not: either way the answer is the one the history gives.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem, SQLiteStore
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.session._journal import Journal
from arkhon_rheo.store import MemoryStore
from tests.support.work_machine import COUNTER, Counting

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("target", [1, 3, 40])
async def test_the_anchor_from_the_load_is_the_historys(
    tmp_path: Path, kind: str, target: int
) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    async with store, AgentSystem(store=store) as system:
        handle = await system.start(COUNTER, Counting(target=target), session_id="a")
        await handle.result()
        journal = Journal(store, COUNTER, "a")
        loaded = await journal.load()
        history = await store.history("a")
        assert history, "the run stored events"
        for excluding in (EventKind.RESUME, EventKind.STEP):
            skipped = (excluding.value, "upgrade")
            expected = max((e.seq for e in history if e.kind not in skipped), default=0)
            assert await journal.last_seq(excluding=excluding, loaded=loaded) == expected
            assert await journal.last_seq(excluding=excluding) == expected
            # As a load finds it once a snapshot was taken after event 1: the events after
            # it hold the answer, or (none of another kind) the history is read.
            later = dataclasses.replace(loaded, snapshot_seq=1, events=loaded.events[1:])
            assert await journal.last_seq(excluding=excluding, loaded=later) == expected
