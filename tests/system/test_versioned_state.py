"""Sessions that outlive a deploy: a store of version 1 read, resumed and replayed by version 2.

The old store is made here by running version 1 of the notes machine
(`tests.support.versioned`): a session paused at its gate and one left
mid-stage, its status "running" as a process killed there leaves it. Each
later version (a field added; a field renamed, with its upgrade; a field
removed, with its upgrade) then replays both before anything is written,
decides and resumes them, and replays them again: every digest, those made by
version 1 over its own values included, verifies, and damage to the log is
still caught. A change no upgrade covers is refused, naming it, with nothing
written; fingerprints of the older digest form still load.
"""

from __future__ import annotations

import functools
import json
import shutil
import sqlite3
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, ExitReason, Machine
from arkhon_rheo.core._fingerprint import fingerprint
from arkhon_rheo.protocols import EventKind, Upgrade
from arkhon_rheo.store import MemoryStore, SQLiteStore
from tests.support import versioned as V
from tests.support.store_rows import event_patch, set_event
from tests.support.tickets import TICKETS, Note, Ticket, Triage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio

#: What each later version reads the score as (``None``: it has no draft).
SCORE = {"added": "score", "renamed": "points", "removed": "score"}


@pytest.fixture
async def old_store(tmp_path: Path) -> Path:
    """A store file with version 1's ``paused`` and ``running`` sessions."""
    path = tmp_path / "v1.db"
    try:
        async with AgentSystem(path=path) as system:
            await V.store_version_1(system)
    finally:
        V.HOLD["event"] = V.HOLD["inside"] = None
    async with SQLiteStore(path) as store:
        await store.set_status("running", "running")  # as a process killed mid-stage leaves it
        assert [(r.session_id, r.status) for r in await store.sessions()] == [
            ("paused", "paused"),
            ("running", "running"),
        ]
    return path


def _store(system: AgentSystem) -> Store:
    assert system.store is not None
    return system.store


def later(change: str, *, gated: bool = False) -> Machine[Any]:
    return V.VERSIONS[change](gated=gated)


@pytest.mark.parametrize("change", list(V.VERSIONS))
async def test_an_old_store_resumes_and_replays_under_version_2(
    old_store: Path, change: str
) -> None:
    gated, plain = later(change, gated=True), later(change)
    score = SCORE[change]
    async with AgentSystem(path=old_store) as system:
        # Read before anything is written: version 1's digests checked on its own values.
        for sid, events in (("paused", 2), ("running", 1)):
            report = await system.stored(gated, sid).replay()
            assert report.ok, report.divergence
            assert report.checked == report.events == events
            assert getattr(report.state, score) == 1
        before = await system.stored(plain, "running").state()
        assert before.notes == ("note 0",)
        assert before.tags == frozenset({"t0"})
        assert ("draft" in type(before).model_fields) is (change != "removed")
        handle = await system.stored(gated, "paused").approve()
        assert handle is not None
        paused = await handle.result()
        running = await (await system.resume(plain, "running")).result()
    assert paused.exit_reason is ExitReason.FINISHED
    assert getattr(paused.state, score) == 1
    assert running.exit_reason is ExitReason.FINISHED
    assert getattr(running.state, score) == 2  # one count before the deploy, one after
    assert running.state.notes == ("note 0", "note 1")
    assert running.state.tags == frozenset({"t0", "t1"})
    if change == "added":
        assert running.state.mood == "calm"
    async with AgentSystem(path=old_store) as system:  # another process, after the deploy
        for sid, machine in (("paused", gated), ("running", plain)):
            report = await system.stored(machine, sid).replay()
            assert report.ok, report.divergence
            assert report.checked == report.events
            history = await system.stored(machine, sid).history()
            kinds = [event.kind for event in history]
            assert kinds.count(EventKind.UPGRADE) == 1
            upgrade = history[kinds.index(EventKind.UPGRADE)]
            assert upgrade.info is not None
            assert upgrade.info["upgrade"] == {"from": 1, "to": machine.version}
            assert upgrade.info["fingerprint"]["form"] == fingerprint(machine)["form"]
            assert report.state == await system.stored(machine, sid).state()
        assert kinds[1:3] == [EventKind.UPGRADE, EventKind.RESUME]  # before the run's first write
        assert history[2].info is not None
        assert history[2].info["rerun"] == "act"
        # Snapshots written since carry the form; a fork is a session of version 2 outright.
        loaded = await _store(system).load("running")
        assert loaded.snapshot["__form__"]["version"] == plain.version
        fork = await system.stored(plain, "running").fork(at_seq=1, new_id="fork")
        assert (await fork.record()).fingerprint == fingerprint(plain)
        assert "__form__" not in (await _store(system).load("fork")).snapshot
        result = await (await fork.resume()).result()
        assert result.ok
        assert (await fork.replay()).ok


async def test_a_rollback_to_before_the_upgrade_reads_the_old_state_upgraded(
    old_store: Path,
) -> None:
    machine = later("renamed")
    async with AgentSystem(path=old_store) as system:
        result = await (await system.resume(machine, "running")).result()
        assert result.state.points == 2
        stored = system.stored(machine, "running")
        assert (await stored.state(1)).points == 1  # event 1 was version 1's
        await stored.rollback(1)
        assert (await stored.state()).points == 1
        again = await (await stored.resume()).result()
        assert again.state.points == 2
        report = await stored.replay()
        assert report.ok, report.divergence
        assert report.checked == report.events


async def test_damage_to_the_log_is_caught_on_either_side_of_the_upgrade(
    old_store: Path, tmp_path: Path
) -> None:
    machine = later("renamed")
    untouched = tmp_path / "untouched.db"
    shutil.copy(old_store, untouched)
    async with AgentSystem(path=old_store) as system:
        await (await system.resume(machine, "running")).result()
    with sqlite3.connect(old_store) as db:  # version 1's step, then one of version 2's
        first = event_patch(db, "running", 1)
        first["append"]["notes"] = ["note X"]
        set_event(db, "running", 1, patch=first)
        last = event_patch(db, "running", 5)
        last["set"]["points"] = 7
        set_event(db, "running", 5, patch=last)
    db.close()
    with sqlite3.connect(untouched) as db:  # never upgraded: its whole log is version 1's
        set_event(db, "paused", 1, patch={"set": {"score": 5}})
    db.close()
    async with AgentSystem(path=old_store) as system:
        report = await system.stored(machine, "running").replay()
        assert not report.ok
        assert report.divergence is not None
        assert report.divergence.seq == 1
        assert "differs from the state committed by this event" in report.divergence.reason
    with sqlite3.connect(old_store) as db:
        set_event(db, "running", 1, patch=first | {"append": {"notes": ["note 0"]}})
    db.close()
    async with AgentSystem(path=old_store) as system:
        report = await system.stored(machine, "running").replay()
        assert report.divergence is not None
        assert report.divergence.seq == 5
    async with AgentSystem(path=untouched) as system:
        report = await system.stored(later("renamed", gated=True), "paused").replay()
        assert report.divergence is not None
        assert report.divergence.seq == 1


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (V.renamed_undeclared, "field 'score' is gone from NotesRenamed"),
        (V.removed_undeclared, "field 'draft' is gone from NotesRemoved"),
        (V.retyped, "field 'score' changed type from int to str"),
    ],
    ids=["renamed", "removed", "retyped"],
)
async def test_a_change_no_upgrade_covers_is_refused_naming_it(
    old_store: Path, make: Callable[[], Machine[Any]], named: str
) -> None:
    machine = make()
    async with AgentSystem(path=old_store) as system:
        before = await _store(system).history("running")
        operations = [
            system.resume(machine, "running"),
            system.stored(machine, "running").replay(),
            system.stored(machine, "running").history(),
            system.stored(machine, "paused").approve(),
            system.stored(machine, "paused").fork(),
        ]
        for operation in operations:
            with pytest.raises(ConfigurationError) as info:
                await operation
            message = str(info.value)
            assert named in message
            assert "stored by version 1 of machine 'notes'" in message
            assert "Machine(..., version=2, upgrades={1: Upgrade(" in message
            assert "arkhon-rheo check" in message
        assert await _store(system).history("running") == before  # nothing written


async def test_an_upgrade_that_leaves_the_state_invalid_is_named(old_store: Path) -> None:
    # A reshape by a function is only checked on the values it gives.
    leftover = V.build(V.NotesRenamed, version=2, upgrades={1: Upgrade(values=lambda v: v)})

    def many(values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "points": "many"} if "points" in values else values

    invalid = V.build(
        V.NotesRenamed, version=2, upgrades={1: Upgrade(rename={"score": "points"}, values=many)}
    )
    async with AgentSystem(path=old_store) as system:
        before = await _store(system).history("running")
        with pytest.raises(
            ConfigurationError, match=r"after its upgrades, its state has \['score'\]"
        ):
            await system.stored(leftover, "running").state()
        with pytest.raises(
            ConfigurationError, match="does not load as version 2 after its upgrades"
        ):
            await system.resume(invalid, "running")
        # Its history upgrades each patch the same way: the same error, naming the session.
        with pytest.raises(ConfigurationError) as info:
            await system.stored(invalid, "running").history()
        message = str(info.value)
        assert "session 'running' (version 1 of machine 'notes')" in message
        assert "does not load as version 2 after its upgrades" in message
        assert await _store(system).history("running") == before


async def test_sessions_upgrade_version_by_version(old_store: Path) -> None:
    """Version 1 to 2 (a rename) in one deploy, 2 to 3 (a removal) in the next."""
    v3 = V.version_3()
    async with AgentSystem(path=old_store) as system:
        V.HOLD["event"], V.HOLD["inside"] = anyio.Event(), anyio.Event()
        try:
            await system.resume(later("renamed"), "running")  # version 2 writes, then holds
            inside = V.HOLD["inside"]
            assert inside is not None
            await inside.wait()
        finally:
            V.HOLD["event"] = V.HOLD["inside"] = None
    async with SQLiteStore(old_store) as store:
        await store.set_status("running", "running")
        assert (await store.load("running")).snapshot["__form__"]["version"] == 2
    async with AgentSystem(path=old_store) as system:
        report = await system.stored(v3, "running").replay()
        assert report.ok, report.divergence
        assert report.checked == report.events
        result = await (await system.resume(v3, "running")).result()
        assert result.ok
        assert result.state.points == 2
        history = await system.stored(v3, "running").history()
        seen = [e.info["upgrade"] for e in history if e.kind is EventKind.UPGRADE and e.info]
        assert seen == [{"from": 1, "to": 2}, {"from": 2, "to": 3}]
        report = await system.stored(v3, "running").replay()
        assert report.ok, report.divergence
        assert report.checked == report.events
        # Version 1's paused session is read by version 3 through both upgrades at once.
        paused = await system.stored(
            V.build(V.NotesV3, version=3, upgrades=v3.upgrades), "paused"
        ).state()
        assert paused.points == 1


async def test_a_session_is_not_read_by_an_earlier_version(old_store: Path) -> None:
    async with AgentSystem(path=old_store) as system:
        await (await system.resume(later("renamed"), "running")).result()
        old = system.stored(V.v1(), "running")
        # Its record still names version 1's fingerprint: its history is refused all the same.
        for read in (old.state, old.history, functools.partial(old.history, children=True)):
            with pytest.raises(ConfigurationError) as info:
                await read()
            message = str(info.value)
            assert "session 'running' was stored by version 2 of machine 'notes'" in message
            assert "never read by an earlier version" in message


async def test_a_parked_session_woken_by_a_message_is_upgraded_before_its_run(
    tmp_path: Path,
) -> None:
    class TicketV2(Ticket):
        priority: int = 0

    tickets_v2 = Machine(
        name="tickets",
        state_type=TicketV2,
        initial=TICKETS.initial,
        transitions=TICKETS.transitions,
        stages=TICKETS.stages,
        terminal=TICKETS.terminal,
        failed=TICKETS.failed,
    )
    assert Triage in tickets_v2.stages.values()
    path = tmp_path / "t.db"
    async with AgentSystem(path=path) as system:
        result = await system.run(TICKETS, Ticket(), session_id="t")
        assert result.exit_reason is ExitReason.WAITING
    async with AgentSystem(path=path) as system:
        sent = await system.send(tickets_v2, "t", Note(text="deployed"))
        assert sent.handle is not None
        woken = await sent.handle.result()
        assert woken.exit_reason is ExitReason.WAITING
        assert woken.state.notes[-1] == "deployed"
        assert woken.state.priority == 0
        history = await system.stored(tickets_v2, "t").history()
        kinds = [event.kind for event in history]
        assert kinds.count(EventKind.UPGRADE) == 1
        assert kinds.index(EventKind.UPGRADE) < len(kinds) - 1
        report = await system.stored(tickets_v2, "t").replay()
        assert report.ok, report.divergence
        assert report.checked == report.events


def _digest_form(path: Path) -> None:
    """Rewrite every session's fingerprint in the digest form stores kept before per-field ones."""
    keys = ("name", "state", "fields", "schema", "states", "transitions")
    with sqlite3.connect(path) as db:
        for sid, text in db.execute("SELECT id, fingerprint FROM sessions").fetchall():
            stored = json.loads(text)
            old = json.dumps({key: stored[key] for key in keys}, separators=(",", ":"))
            db.execute("UPDATE sessions SET fingerprint = ? WHERE id = ?", (old, sid))
    db.close()


async def test_fingerprints_of_the_digest_form_still_load(old_store: Path, tmp_path: Path) -> None:
    _digest_form(old_store)
    added = tmp_path / "added.db"
    shutil.copy(old_store, added)
    async with AgentSystem(path=old_store) as system:  # the same machine: read as it is
        for sid in ("paused", "running"):
            report = await system.stored(V.v1(gated=True), sid).replay()
            assert report.ok, report.divergence
        assert (await (await system.resume(V.v1(), "running")).result()).ok
        kinds = [e.kind for e in await system.stored(V.v1(), "running").history()]
        assert EventKind.UPGRADE not in kinds  # nothing to upgrade
        assert "__form__" not in (await _store(system).load("running")).snapshot
        assert (await system.stored(V.v1(), "running").replay()).ok
    async with AgentSystem(path=added) as system:  # a field added since: compatible
        machine = later("added")
        assert (await system.stored(machine, "running").replay()).ok
        result = await (await system.resume(machine, "running")).result()
        assert result.state.mood == "calm"
        report = await system.stored(machine, "running").replay()
        assert report.ok, report.divergence
        assert report.checked == report.events
        with pytest.raises(ConfigurationError, match="types of fields it shares"):
            await system.stored(V.retyped(), "paused").state()
        handle = await system.stored(later("renamed", gated=True), "paused").approve()
        assert handle is not None
        assert (await handle.result()).state.points == 1
        assert (await system.stored(later("renamed", gated=True), "paused").replay()).ok


async def test_a_rollback_and_a_fork_of_a_session_not_yet_upgraded(old_store: Path) -> None:
    machine = later("removed")
    async with AgentSystem(path=old_store) as system:
        stored = system.stored(machine, "running")
        fork = await stored.fork(new_id="fork")  # read as version 2; the original untouched
        assert (await fork.state()).notes == ("note 0",)
        assert [e.kind for e in await stored.history()] == [EventKind.STEP]
        event = await stored.rollback(0)  # the upgrade is recorded first, in the same write
        assert event.seq == 3
        kinds = [e.kind for e in await stored.history()]
        assert kinds == [EventKind.STEP, EventKind.UPGRADE, EventKind.ROLLBACK]
        assert (await stored.state()).notes == ()
        report = await stored.replay()
        assert report.ok, report.divergence
        assert report.checked == report.events == 3
        result = await (await stored.resume()).result()
        assert result.ok
        assert result.state.score == 2


async def test_an_old_memory_store_is_read_by_version_2() -> None:
    async with MemoryStore() as store:
        try:
            async with AgentSystem(store=store) as system:
                await V.store_version_1(system)
        finally:
            V.HOLD["event"] = V.HOLD["inside"] = None
        machine = later("renamed")
        async with AgentSystem(store=store) as system:
            result = await (await system.resume(machine, "running")).result()
            assert result.state.points == 2
            handle = await system.stored(later("renamed", gated=True), "paused").approve()
            assert handle is not None
            assert (await handle.result()).state.points == 1
            for sid in ("running", "paused"):
                report = await system.stored(machine, sid).replay()
                assert report.ok, report.divergence
                assert report.checked == report.events


async def test_the_inspectors_timeline_of_an_upgraded_session_is_exact(old_store: Path) -> None:
    from arkhon_rheo.inspector._data import load_timeline

    machine = later("renamed")
    async with AgentSystem(path=old_store) as system:
        before = await load_timeline(_store(system), "running", machine)
        assert before.exact
        assert before.state["points"] == "1"
        await (await system.resume(machine, "running")).result()
        after = await load_timeline(_store(system), "running", machine)
    assert after.exact
    assert len(after.steps) == 6
    assert after.state["points"] == "2"
