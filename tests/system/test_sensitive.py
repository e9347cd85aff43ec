"""Sensitive state fields: sealed in the store, never shown; sessions resume, replay and fork.

The `vault` machine (tests/support/sensitive.py) handles four secrets: a token
it starts with, a new token a tool hands back, a PIN and a note. Each test
looks for every one of them, as text, where it must not be: each byte of the
SQLite file (its WAL and shared-memory files too, and every cell of every
table, compressed ones inflated), the recorded calls, failure records, gate
questions, the inbox, a replay's report.
"""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem, ExitReason, History, MemoryStore, SQLiteStore
from arkhon_rheo._redact import scrub
from arkhon_rheo.errors import KeyringError, StoreCorrupt
from tests.support.sensitive import (
    FAILURES,
    NEW_TOKEN,
    NOTE,
    PIN,
    SECRETS,
    TOKEN,
    V,
    Vault,
    vault,
)

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring

if TYPE_CHECKING:
    from collections.abc import Iterator

    from arkhon_rheo import TransitionEvent

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FAILURES.clear()
    yield
    FAILURES.clear()


@pytest.fixture
def key() -> str:
    return Keyring.generate()


def _cells(path: Path) -> Iterator[bytes]:
    """Every cell of every table of the SQLite file, as bytes (zlib data inflated too)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    if isinstance(cell, bytes):
                        yield cell
                        with contextlib.suppress(zlib.error):
                            yield zlib.decompress(cell)
                    elif cell is not None:
                        yield str(cell).encode()


def stored_bytes(path: Path) -> bytes:
    """The file's bytes, its WAL's and shared memory's, and its cells', in one."""
    files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
    return b"\n".join([*(p.read_bytes() for p in files), *_cells(path)])


def assert_hidden(data: bytes | str, where: str) -> None:
    blob = data.encode() if isinstance(data, str) else data
    for secret in SECRETS:
        assert secret.encode() not in blob, f"{secret!r} found in {where}"


async def _paused(path: Path, key: str, session_id: str = "v1") -> None:
    """Run a vault session until it pauses at its gate, with the file open: check the file."""
    async with AgentSystem(path=path, secrets=Keyring(key)) as system:
        result = await system.run(vault, Vault(token=TOKEN), session_id=session_id)
        assert result.exit_reason is ExitReason.PAUSED
        assert result.state.token == NEW_TOKEN  # the application sees its values
        assert result.state.pin == PIN
        assert tuple(result.state.notes) == (NOTE,)
        assert_hidden(stored_bytes(path), "the store file, open")


async def test_no_byte_of_the_store_holds_a_sensitive_value(tmp_path: Path, key: str) -> None:
    path = tmp_path / "vault.db"
    await _paused(path, key)
    assert_hidden(stored_bytes(path), "the store file")
    async with SQLiteStore(path) as store:
        events = await store.history("v1")
        # What a step recorded: the request's token masked, the response that brought
        # the new one sealed (the step wrote it to a sensitive field).
        login = events[0].io["io"][0]
        assert login["request"]["authorization_header"] == "Token [REDACTED]"
        exchanged = events[1].io["io"][0]
        assert exchanged["response"]["new"].startswith("arkhon-sealed:1:")
        failure = next(event.error for event in events if event.error)
        assert "[REDACTED]" in failure["message"]
        record = await store.record("v1")
        assert record.waiting is not None
        assert "[REDACTED]" in record.waiting["question"]
        assert_hidden(repr((events, record, await store.load("v1"))), "the store's records")


async def test_a_paused_session_resumes_replays_and_forks_with_the_key(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "vault.db"
    await _paused(path, key)
    async with AgentSystem(path=path, secrets=Keyring(key)) as system:
        stored = system.stored(vault, "v1")
        assert (await stored.state()).token == NEW_TOKEN
        report = await stored.replay(reexecute=True)
        assert report.ok, report.divergence
        assert report.reexecuted >= 3
        assert report.checked == report.events
        result = await (await stored.approve()).result()
        assert result.exit_reason is ExitReason.FINISHED
        assert result.state.token == NEW_TOKEN
        assert result.state.reply == "sent for ann"
        assert (await stored.replay(reexecute=True)).ok
        fork = await stored.fork(at_seq=1, new_id="v1-fork")
        forked = await fork.state()
        assert (forked.token, forked.pin, tuple(forked.notes)) == (TOKEN, 0, (NOTE,))
        FAILURES["v1-fork"] = 2
        ended = await (await fork.resume()).result()
        assert ended.exit_reason is ExitReason.PAUSED
        assert ended.state.token == NEW_TOKEN
        assert (await fork.replay(reexecute=True)).ok
    assert_hidden(stored_bytes(path), "the store file after resume and fork")


async def test_a_session_stopped_mid_run_resumes_with_the_key(tmp_path: Path, key: str) -> None:
    path = tmp_path / "vault.db"

    def stop(event: TransitionEvent) -> None:
        if event.seq == 2:  # the token exchanged: stop the run there
            system.session(event.session_id).cancel()

    async with AgentSystem(path=path, secrets=Keyring(key), listeners=[stop]) as system:
        result = await system.run(vault, Vault(token=TOKEN), session_id="v1")
        assert result.exit_reason is ExitReason.CANCELLED
    async with AgentSystem(path=path, secrets=Keyring(key)) as system:
        result = await (await system.resume(vault, "v1")).result()
        assert result.exit_reason is ExitReason.PAUSED
        assert result.state.token == NEW_TOKEN
        assert (await system.stored(vault, "v1").replay(reexecute=True)).ok
    assert_hidden(stored_bytes(path), "the store file")


async def test_without_the_key_nothing_is_stored_or_loaded(tmp_path: Path, key: str) -> None:
    path = tmp_path / "vault.db"
    async with AgentSystem(path=path) as system:
        with pytest.raises(KeyringError, match="no keyring was given") as refused:
            await system.start(vault, Vault(token=TOKEN), session_id="v0")
        assert refused.value.field in {"token", "pin", "notes"}
        assert await system.store.sessions() == ()  # type: ignore[union-attr]
    await _paused(path, key)
    async with AgentSystem(path=path) as system:
        stored = system.stored(vault, "v1")
        for read in (stored.state, stored.replay, stored.approve, stored.history):
            with pytest.raises(KeyringError, match=f"sealed under key {Keyring(key).key_id}"):
                await read()
        with pytest.raises(KeyringError):
            await stored.fork(new_id="f")
    other = Keyring(Keyring.generate())
    async with AgentSystem(path=path, secrets=other) as system:
        with pytest.raises(KeyringError, match="which the keyring does not hold") as wrong:
            await system.stored(vault, "v1").replay()
        assert wrong.value.key_id == Keyring(key).key_id
        assert other.key_id in str(wrong.value)
        assert (await system.stored(vault, "v1").record()).status == "paused"  # untouched


async def test_a_rotated_keyring_opens_and_verifies_what_the_old_key_sealed(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "vault.db"
    await _paused(path, key)
    rotated = Keyring(Keyring.generate(), previous=[key])
    async with AgentSystem(path=path, secrets=rotated) as system:
        stored = system.stored(vault, "v1")
        assert (await stored.replay(reexecute=True)).ok
        assert (await (await stored.approve()).result()).exit_reason is ExitReason.FINISHED
        assert (await stored.replay()).ok
    async with SQLiteStore(path) as store:
        last = (await store.history("v1"))[-1]
        assert rotated.key_id in repr(await store.load("v1"))  # sealed with the new key now
        assert last.digest is not None


async def test_a_damaged_or_moved_value_is_refused(tmp_path: Path, key: str) -> None:
    path = tmp_path / "vault.db"
    await _paused(path, key)
    await _paused(path, key, "v2")
    async with SQLiteStore(path) as store:
        first = (await store.history("v1"))[0].patch
        second = (await store.history("v2"))[0].patch
    assert first["append"]["notes"] != second["append"]["notes"]  # a fresh nonce each time
    token, theirs = second["append"]["notes"][0], first["append"]["notes"][0]
    with sqlite3.connect(path) as db:  # v2's first event gets v1's sealed note in its place
        rows = db.execute("SELECT session, seq, patch FROM events").fetchall()
        moved = 0
        for session, seq, patch in rows:
            text = patch if isinstance(patch, str) else bytes(patch).decode()
            if token in text:
                db.execute(
                    "UPDATE events SET patch = ? WHERE session = ? AND seq = ?",
                    (text.replace(token, theirs), session, seq),
                )
                moved += 1
        assert moved == 1
    async with AgentSystem(path=path, secrets=Keyring(key)) as system:
        with pytest.raises(StoreCorrupt, match="copied from another session or field"):
            await system.stored(vault, "v2").state()


async def test_the_state_repr_masks_sensitive_values() -> None:
    state = Vault(token=TOKEN, pin=PIN, notes=History([NOTE]))
    shown = f"{state!r} {state}"
    assert_hidden(shown, "the state's repr")
    assert "token='[SENSITIVE]'" in shown
    assert "user='ann'" in shown


async def test_in_memory_sessions_need_no_key_and_hold_values_only_while_running() -> None:
    async with AgentSystem(path=None) as system:
        result = await system.run(vault, Vault(token=TOKEN), session_id="m1")
        assert result.exit_reason is ExitReason.PAUSED
        assert "[REDACTED]" in (result.state.last_error.message if result.state.last_error else "")
        assert_hidden(repr(result.state), "the state's repr")
    # Released with the run: the registry holds the values of sessions running only.
    assert scrub(f"{TOKEN} {NEW_TOKEN} {NOTE}") == f"{TOKEN} {NEW_TOKEN} {NOTE}"


async def test_a_memory_store_keeps_sealed_values_too(key: str) -> None:
    async with MemoryStore() as store, AgentSystem(store=store, secrets=Keyring(key)) as system:
        result = await system.run(vault, Vault(token=TOKEN), session_id="m1")
        assert result.exit_reason is ExitReason.PAUSED
        loaded = await store.load("m1")
        assert_hidden(repr((loaded, await store.history("m1"))), "the memory store")
        assert (await system.stored(vault, "m1").replay(reexecute=True)).ok


async def test_an_edit_of_a_sensitive_field_is_sealed_and_its_message_masked(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "vault.db"
    await _paused(path, key)
    edited = "tok-edited-by-a-human-77"
    async with AgentSystem(path=path, secrets=Keyring(key)) as system:
        stored = system.stored(vault, "v1")
        await stored.edit({"token": edited, "user": "bob"})
        assert (await stored.state()).token == edited
        messages = await system.store.messages("v1")  # type: ignore[union-attr]
        assert messages[-1].payload["fields"] == {"token": "[SENSITIVE]", "user": "bob"}
    assert edited.encode() not in stored_bytes(path)


@pytest.mark.parametrize(
    "text",
    ["", "short", "not base64 !!", "a" * 40, "b" * 64],
)
def test_a_keyring_refuses_what_is_not_a_key(text: str) -> None:
    from arkhon_rheo import ConfigurationError

    with pytest.raises(ConfigurationError, match="32 random bytes") as refused:
        Keyring(text)
    if text:
        assert text not in str(refused.value)


def test_a_keyring_never_shows_its_keys(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    import pickle

    ring = Keyring(key, previous=[Keyring.generate()])
    assert key not in repr(ring)
    assert f"key {ring.key_id} and 1 previous" in repr(ring)
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(ring)
    monkeypatch.setenv("ARKHON_RHEO_KEY", f"{key},{Keyring.generate()}")
    loaded = Keyring.from_env()
    assert loaded is not None
    assert loaded.key_ids[0] == ring.key_id
    assert len(loaded.key_ids) == 2
    monkeypatch.delenv("ARKHON_RHEO_KEY")
    assert Keyring.from_env() is None
    assert V.DONE.value == "done"
