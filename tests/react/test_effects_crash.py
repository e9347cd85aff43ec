"""Once-only effects across SIGKILL: a call runs once, or waits for a human; never twice.

`crash_loop` SIGKILLs a child process running many sessions of an agent
(`tests/support/effects_child.py`) whose two tools each append a line to a
world file: ``send`` (a call that may have happened waits for a human) and
``charge`` (it fails the session). After every run, this test reads the world
file as the next process finds it: no call's effect is in it twice, every
effect in it has its intent in its session's effect ledger, and every call the
ledger has done is in it exactly once. At the end every session is finished
(each of its calls done, once), paused at its ``"tool call"`` gate (a ``send``
call that may have happened, shown with its arguments) or failed on an
``AmbiguousEffect`` (a ``charge`` call that may have); every session replays.

Linux (POSIX) only: it relies on SIGKILL.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo.protocols import EffectStatus, EventKind, Lifecycle
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import crash_loop
from tests.support.effects_child import CALLS, WORLD, effects_made

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import StoredEffect

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="the crash test kills its child with SIGKILL"
)

MACHINE = "tests.support.effects_child:machine"
STATE = "tests.support.effects_child:initial"


async def _ledgers(db: Path) -> dict[str, tuple[str, tuple[StoredEffect, ...]]]:
    async with SQLiteStore(db) as store:
        return {
            record.session_id: (record.status, await store.effects(record.session_id))
            for record in await store.sessions()
        }


def check_world(db: Path, world: Path, backend: str) -> dict[str, Any]:
    """No effect twice; each in the world was intended first; each done one is there once."""
    made = effects_made(world)
    twice = {key: n for key, n in made.items() if n > 1}
    assert not twice, f"effects that happened twice: {twice}"
    ledgers = anyio.run(_ledgers, db, backend=backend)
    entries = {entry.key: entry for _, found in ledgers.values() for entry in found}
    assert set(made) <= set(entries), f"effects with no intent: {set(made) - set(entries)}"
    for entry in entries.values():
        if entry.status is EffectStatus.DONE:
            assert made[entry.key] == 1, f"done once, in the world {made[entry.key]} times"
        assert entry.attempts == 1  # nothing ran again: neither tool is idempotent
    return {"made": made, "ledgers": ledgers}


async def _outcomes(db: Path) -> dict[str, tuple[str, Any, Any]]:
    """Each session's status, what its last pause recorded, and its last failure's type.

    (What a paused session waits for is read from its pause event, not from its
    record's ``waiting``: a kill between the pause's commit and the park that
    follows it leaves the record without it, and the session paused all the same.)
    """
    async with SQLiteStore(db) as store:
        found = {}
        for record in await store.sessions():
            events = await store.history(record.session_id)
            failures = [e.error for e in events if e.kind == EventKind.FAILURE.value and e.error]
            pauses = [e.io for e in events if e.kind == EventKind.PAUSE.value]
            found[record.session_id] = (
                record.status,
                pauses[-1] if pauses else None,
                failures[-1]["error_type"] if failures else None,
            )
        return found


def run_effects_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, seed: int, backend: str, kills: int
) -> None:
    db, world = tmp_path / "agent.db", tmp_path / "world.txt"
    monkeypatch.setenv(WORLD, str(world))  # the children inherit it

    def check(path: Path) -> None:
        check_world(path, world, backend)

    report = crash_loop(
        MACHINE,
        STATE,
        path=db,
        kills=kills,
        sessions=4,
        new_per_run=2,
        seed=seed,
        backend=backend,
        commits_between_kills=12,
        check=check,
    )
    assert report.kills == kills
    assert report.lost == ()
    assert report.integrity == ()
    for session_id, replay in report.replays.items():
        assert replay.ok, (session_id, replay.divergence)
    seen = check_world(db, world, backend)
    made, ledgers = seen["made"], seen["ledgers"]
    outcomes = anyio.run(_outcomes, db, backend=backend)
    counts = {"finished": 0, "paused": 0, "failed": 0}
    for session_id, (status, pause, error) in outcomes.items():
        _, entries = ledgers[session_id]
        started = [e for e in entries if e.status is EffectStatus.STARTED]
        state = report.replays[session_id].state
        if state.lifecycle is Lifecycle.FINISHED:
            counts["finished"] += 1
            assert len(entries) == CALLS
            assert all(e.status is EffectStatus.DONE and made[e.key] == 1 for e in entries)
        elif status == "paused":
            counts["paused"] += 1
            # A send that may have happened: a human sees it, its arguments, and decides.
            assert pause is not None
            assert pause["gate"] == "tool call", pause
            question = pause["question"]
            assert (question["tool"], question["reason"]) == ("send", "ambiguous")
            assert question["arguments"]["what"].endswith(question["call_id"].split("-")[1])
            ((entry,),) = [started]
            assert entry.tool == "send"
            assert made[entry.key] <= 1
        else:
            counts["failed"] += 1
            # A charge that may have happened: the session failed rather than charge twice.
            assert state.lifecycle is Lifecycle.FAILED, (session_id, status)
            assert error is not None
            assert error.endswith("AmbiguousEffect"), error
            ((entry,),) = [started]
            assert entry.tool == "charge"
            assert made[entry.key] <= 1
    assert counts["finished"] > 0, counts
    # Sessions the report calls unfinished or failed are exactly those a human or the
    # policy stopped (the loop's own failures are none).
    assert set(report.unfinished) == {
        sid for sid, (status, _, _) in outcomes.items() if status == "paused"
    }


CASES = [
    pytest.param(11, "asyncio", id="asyncio"),
    pytest.param(12, "trio", id="trio"),
]


@pytest.mark.parametrize(("seed", "backend"), CASES)
def test_a_killed_side_effect_runs_once_or_waits_for_a_human(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, backend: str
) -> None:
    run_effects_crashes(tmp_path, monkeypatch, seed=seed, backend=backend, kills=4)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "backend"), CASES)
def test_side_effects_survive_hundreds_of_sigkills_never_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, backend: str
) -> None:
    run_effects_crashes(tmp_path, monkeypatch, seed=100 + seed, backend=backend, kills=200)
