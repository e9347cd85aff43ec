"""Snapshots by cost: they take about the room of the events, and keep a load's fold short.

By default a session is snapshotted once the events stored since its last
snapshot weigh as much as the state did then (and at least
`SNAPSHOT_MIN_BYTES`): on a state that grows every step the snapshots no longer
grow quadratically with the history, and loading a session folds a bounded
number of events after its latest one. ``snapshot_every=N`` still takes one
every N events.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem, ExitReason
from arkhon_rheo.session._persist import EVENT_BYTES, SNAPSHOT_MIN_BYTES
from tests.fixtures.store_v3 import Ledger, ledger_machine
from tests.support.store_rows import snapshot_state

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def _snapshots(path: Path) -> list[tuple[int, int]]:
    """``(seq, bytes of JSON)`` of each snapshot in the file, in order."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT seq, state FROM snapshots ORDER BY seq").fetchall()
    return [
        (seq, len(json.dumps(snapshot_state(state), separators=(",", ":")))) for seq, state in rows
    ]


def _event_bytes(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        (patches, count) = db.execute("SELECT sum(length(patch)), count(*) FROM events").fetchone()
    return int(patches) + EVENT_BYTES * int(count)


async def test_a_growing_state_is_snapshotted_by_cost(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    machine = ledger_machine()
    async with AgentSystem(path=path) as system:
        result = await system.run(machine, Ledger(cycles=1000), session_id="g", max_steps=3100)
        assert result.exit_reason is ExitReason.FINISHED
        loaded = await system.store.load("g")  # type: ignore[union-attr]
        assert (await system.stored(machine, "g").replay()).ok
    snapshots = _snapshots(path)
    (last_seq, last_size) = snapshots[-1]
    assert loaded.snapshot_seq == last_seq
    # Each event after the latest snapshot cost at least EVENT_BYTES, and together
    # less than the state weighed then: the fold after it is short.
    assert len(loaded.events) * EVENT_BYTES < max(last_size, SNAPSHOT_MIN_BYTES)
    # Not one every N events: further apart as the state grows...
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(snapshots[1:])]
    assert 10 <= len(snapshots) <= 40
    assert gaps[-1] > 3 * gaps[0]
    # ...so that together they weigh no more than about twice the events.
    assert sum(size for _, size in snapshots[1:]) <= 2 * _event_bytes(path)


async def test_a_resumed_run_snapshots_at_its_first_commit(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    gated = ledger_machine(gated=True)
    async with AgentSystem(path=path) as system:
        await system.run(gated, Ledger(cycles=2), session_id="g")
        paused = (await system.store.record("g")).last_seq  # type: ignore[union-attr]
        handle = await system.stored(gated, "g").approve()
        assert handle is not None
        await handle.result()
    seqs = [seq for seq, _ in _snapshots(path)]
    # The decision is stored with a snapshot; the resumed run's first commit takes
    # one too (it cannot know how many events its store holds after the latest).
    assert seqs[0] == 0
    assert paused + 1 in seqs
    assert paused + 2 in seqs


async def test_snapshot_every_still_takes_one_every_n_events(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with AgentSystem(path=path, snapshot_every=5) as system:
        await system.run(ledger_machine(), Ledger(cycles=7), session_id="g")
    assert [seq for seq, _ in _snapshots(path)] == [0, 5, 10, 15, 20]
