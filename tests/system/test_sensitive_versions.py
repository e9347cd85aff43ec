"""Sensitive fields across a deploy: sealed sessions of version 1 read, resumed and replayed by 2.

The old store is made by running version 1 of the safe machine
(`tests.support.sealed_versions`) with a keyring: a session paused at its gate
and one left mid-stage ("running", as a process killed there leaves it), each
with a sensitive string, a sensitive sequence and a recorded call whose answer
holds a secret. Version 2 renames the sensitive string, removes a plain field,
widens one and adds one. With the key, it replays both before anything is
written (version 1's keyed digests checked on its opened values), decides and
resumes them, and replays them again (re-executing what version 2 ran); the
``upgrade`` event's whole-state patch is sealed and its digest keyed, the
snapshots after it marked and sealed, and no secret is in any byte of the
store. Without the key nothing is read; the inspector folds the session
exactly, before and after its upgrade, showing no secret.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem, ExitReason
from arkhon_rheo.core._sealed import is_sealed
from arkhon_rheo.errors import KeyringError
from arkhon_rheo.inspector._data import load_timeline
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.protocols._seams import SENSITIVE
from arkhon_rheo.session._compiled import compiled
from arkhon_rheo.store import SQLiteStore
from tests.support import sealed_versions as S

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring
from tests.system.test_sensitive import stored_bytes

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.inspector._data import Timeline
    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def key() -> str:
    return Keyring.generate()


@pytest.fixture
async def old_store(tmp_path: Path, key: str) -> Path:
    """A store file with version 1's sealed ``paused`` and ``running`` sessions."""
    path = tmp_path / "v1.db"
    try:
        async with AgentSystem(path=path, secrets=Keyring(key)) as system:
            await S.store_version_1(system)
    finally:
        S.HOLD["event"] = S.HOLD["inside"] = None
    async with SQLiteStore(path) as store:
        await store.set_status("running", "running")  # as a process killed mid-stage leaves it
        assert [(r.session_id, r.status) for r in await store.sessions()] == [
            ("paused", "paused"),
            ("running", "running"),
        ]
    assert_hidden(stored_bytes(path), "version 1's store")
    return path


def assert_hidden(data: bytes | str, where: str) -> None:
    blob = data.encode() if isinstance(data, str) else data
    for secret in S.SECRETS:
        assert secret.encode() not in blob, f"{secret!r} found in {where}"


def _store(system: AgentSystem) -> Store:
    assert system.store is not None
    return system.store


def _shown(timeline: Timeline) -> str:
    """All a timeline shows, as text."""
    steps = [
        (step.event.patch, step.event.io, [(c.name, c.before, c.after) for c in step.changes])
        for step in timeline.steps
    ]
    return json.dumps([timeline.state, steps, [step.calls for step in timeline.steps]], default=str)


async def test_a_sealed_session_of_version_1_loads_resumes_and_replays_under_version_2(
    old_store: Path, key: str
) -> None:
    keyring = Keyring(key)
    async with AgentSystem(path=old_store, secrets=keyring) as system:
        # Read before anything is written: version 1's keyed digests, on its opened values.
        for sid, events in (("paused", 2), ("running", 3)):
            report = await system.stored(S.v2, sid).replay()
            assert report.ok, report.divergence
            assert report.checked == report.events == events
            assert report.state.token == S.TOKENS[0]  # renamed: opened under its old name
        state = await system.stored(S.v2, "paused").state()
        assert (state.token, state.pins, state.count) == (S.TOKENS[0], (S.PINS[0],), 1)
        assert (state.user, state.mood) == ("ann", "calm")
        assert "draft" not in type(state).model_fields
        handle = await system.stored(S.v2, "paused").approve()
        assert handle is not None
        paused = await handle.result()
        running = await (await system.resume(S.v2, "running")).result()
        for _ in range(2):  # the gate it was stopped past asks again, then its second cycle's
            assert running.exit_reason is ExitReason.PAUSED
            handle = await system.stored(S.v2, "running").approve()
            assert handle is not None
            running = await handle.result()
    assert paused.exit_reason is ExitReason.FINISHED
    assert running.exit_reason is ExitReason.FINISHED
    assert (running.state.token, running.state.count) == (S.TOKENS[1], 2)
    assert running.state.pins == (S.PINS[0], S.PINS[1])  # one written by each version
    assert S.TOKENS[1] not in repr(running.state)
    assert_hidden(stored_bytes(old_store), "the store after the upgrade")
    async with AgentSystem(path=old_store, secrets=keyring) as system:  # after the deploy
        for sid in ("paused", "running"):
            stored = system.stored(S.v2, sid)
            report = await stored.replay(reexecute=True)  # version 2's steps run again
            assert report.ok, report.divergence
            assert report.checked == report.events
            assert report.state == await stored.state()
            assert report.digest in keyring.digests(compiled(S.v2).hasher.of(report.state))
            history = await stored.history()
            kinds = [event.kind for event in history]
            assert kinds.count(EventKind.UPGRADE) == 1
            upgrade = history[kinds.index(EventKind.UPGRADE)]
            assert upgrade.patch.values["token"] == S.TOKENS[0]  # opened when read
            await _upgrade_is_sealed(_store(system), sid, kinds.index(EventKind.UPGRADE) + 1)
        assert kinds[3:5] == [EventKind.UPGRADE, EventKind.RESUME]  # before its first write
        report = await system.stored(S.v2, "running").replay()
        assert S.TOKENS[1] not in repr(report)
        # A fork at version 1's step: its values opened there, sealed again for the fork.
        fork = await system.stored(S.v2, "running").fork(at_seq=1, new_id="fork")
        assert (await fork.state()).token == S.TOKENS[0]
        assert is_sealed((await _store(system).load("fork")).snapshot["token"])
        assert (await fork.replay()).ok
    assert_hidden(stored_bytes(old_store), "the store after a replay and a fork")


async def _upgrade_is_sealed(store: Store, session_id: str, seq: int) -> None:
    """The stored ``upgrade`` event: its patch's secrets sealed, its digest keyed."""
    stored = next(e for e in await store.history(session_id) if e.seq == seq)
    assert stored.kind == "upgrade"
    written = stored.patch["set"]
    assert is_sealed(written["token"])
    assert written["pins"]
    assert all(is_sealed(pin) for pin in written["pins"])
    assert "secret" not in written
    assert "draft" not in written
    assert written["mood"] == "calm"  # not sensitive: plain
    loaded = await store.load(session_id)
    assert loaded.snapshot["__form__"]["version"] == 2  # marked, then sealed
    assert is_sealed(loaded.snapshot["token"])


async def test_without_the_key_a_sealed_session_of_version_1_is_not_read(
    old_store: Path,
) -> None:
    async with AgentSystem(path=old_store) as system:
        stored = system.stored(S.v2, "paused")
        for read in (stored.state(), stored.replay(), system.resume(S.v2, "running")):
            with pytest.raises(KeyringError, match="sealed under key"):
                await read
        assert [e.kind for e in await _store(system).history("paused")] == ["step", "pause"]
    async with AgentSystem(path=old_store, secrets=Keyring(Keyring.generate())) as system:
        with pytest.raises(KeyringError, match="which the keyring does not hold"):
            await system.stored(S.v2, "paused").state()


async def test_the_inspector_folds_a_sealed_session_before_and_after_its_upgrade(
    old_store: Path, key: str
) -> None:
    keyring = Keyring(key)
    async with SQLiteStore(old_store) as store:  # version 1's, read by version 2
        timeline = await load_timeline(store, "paused", S.v2, keyring)
    assert timeline.exact
    assert json.loads(timeline.state["token"]) == SENSITIVE
    assert json.loads(timeline.state["count"]) == 1
    assert "draft" not in timeline.state
    assert_hidden(_shown(timeline), "the timeline before the upgrade")
    async with AgentSystem(path=old_store, secrets=keyring) as system:
        handle = await system.stored(S.v2, "paused").approve()
        assert handle is not None
        await handle.result()
    async with SQLiteStore(old_store) as store:
        timeline = await load_timeline(store, "paused", S.v2, keyring)
        plain = await load_timeline(store, "paused")  # no machine: the stored JSON, masked
    assert timeline.exact
    kinds = [step.event.kind for step in timeline.steps]
    assert kinds == ["step", "pause", "upgrade", "decision", "step"]
    assert json.loads(timeline.state["lifecycle"]) == "Finished"
    assert json.loads(timeline.state["pins"]) == SENSITIVE
    assert_hidden(_shown(timeline), "the timeline after the upgrade")
    assert not plain.exact
    assert_hidden(_shown(plain), "the timeline folded without the machine")
