"""The store suite: one set of tests, run on every store, durability mode and backend.

``memory`` is `MemoryStore`; ``sync``, ``batched`` and ``async`` are `SQLiteStore` in
that mode with the default driver (threads); ``aiosqlite`` is `SQLiteStore` on
aiosqlite (asyncio only: skipped on trio, and without the optional extra);
``postgres`` is `PostgresStore`. Files that must be refused are in
``test_store_files.py``. What the protocol asks of every store
(the log, sessions, refusals, leases, inboxes, effects, reopening) is the conformance
suite's, run on each store by ``test_conformance.py``; these tests are the package's
stores' own: their options, writers, batching, codec, modes and what their errors say.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from arkhon_rheo import ConfigurationError, SessionError, SessionLocked, SessionNotFound, StoreError
from arkhon_rheo.errors import DuplicateEvent, InboxFull, LeaseLost, UnserializablePatch
from arkhon_rheo.protocols import Durability, NewMessage, Store, StoredEvent
from arkhon_rheo.protocols._encoded import EncodedJson
from arkhon_rheo.store import SQLiteStore, StoreState
from tests.store.conftest import HAVE_AIOSQLITE, NO_AIOSQLITE
from tests.support.store_rows import WriterBegins

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from arkhon_rheo.store._driver import Rows, Script
    from tests.store.conftest import AnyStore, Kind

pytestmark = pytest.mark.anyio


def event(session_id: str, seq: int, **changes: Any) -> StoredEvent:
    base = StoredEvent(
        session_id=session_id,
        seq=seq,
        kind="step",
        stage="think",
        from_state="Thinking",
        to_state="Acting",
        reads=("messages",),
        writes=("answer", "messages"),
        patch={
            "set": {"answer": f"answer {seq}"},
            "append": {"messages": [{"role": "assistant", "text": f"step {seq}", "n": 1.5}]},
        },
        attempt=1,
        started_at=1000.0 + seq,
        finished_at=1000.25 + seq,
        io={"model": [{"request": "q", "response": "r"}]},
    )
    return dataclasses.replace(base, **changes)


def events(session_id: str, first: int, last: int) -> list[StoredEvent]:
    return [event(session_id, seq) for seq in range(first, last + 1)]


async def test_every_store_implements_the_protocol(make_store: Callable[..., AnyStore]) -> None:
    store = make_store()
    assert isinstance(store, Store)
    states = [store.state]
    async with store as entered:
        assert entered is store
        states.append(store.state)
    states.append(store.state)
    assert states == [StoreState.NEW, StoreState.OPEN, StoreState.CLOSED]


async def test_a_snapshot_beyond_the_last_event_is_refused(
    make_store: Callable[..., AnyStore],
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="snapshot"):
            await store.append("s", events("s", 1, 1), snapshot=(2, {}))
        assert await store.history("s") == ()


async def test_the_stores_clock_stamps_sessions_and_messages(
    make_store: Callable[..., AnyStore],
) -> None:
    # (The conformance suite cannot set a store's clock: this is the package's stores'.)
    async with make_store(clock=lambda: 1234.5) as store:
        record = await store.create_session("s", machine="m", snapshot={})
        posted, _ = await store.post("s", NewMessage("a", "Ask", {}, 2000.0), capacity=5)
        assert (record.created_at, record.updated_at) == (1234.5, 1234.5)
        assert (posted.posted_at, posted.due_at) == (1234.5, 2000.0)
    clock = iter(range(100, 200))
    async with make_store(clock=lambda: float(next(clock))) as store:
        created = await store.create_session("t", machine="m", snapshot={})
        await store.set_status("t", "paused")
        await store.append("t", events("t", 1, 1), status="running")
        record = await store.record("t")
        assert 100 <= created.created_at < record.updated_at < 200


async def test_each_refusal_says_what_was_wrong(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    # The conformance suite (tests/store/test_conformance.py) checks which error each
    # refusal is and that it writes nothing; this checks what the package's stores say.
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.append("s", events("s", 1, 2))
        with pytest.raises(DuplicateEvent, match="#3"):
            await store.append("s", [event("s", 2)])
        with pytest.raises(SessionError, match="exists already"):
            await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="not JSON"):
            await store.create_session("t", machine="m", snapshot=b"\xff{")
        with pytest.raises(StoreError, match="not JSON"):
            await store.append("s", events("s", 3, 3), snapshot=(3, b"{"))
        for mid in ("a", "b"):
            await store.post("s", NewMessage(mid, "Ask", {}, 1000.0), capacity=2)
        with pytest.raises(InboxFull, match="inbox_capacity"):
            await store.post("s", NewMessage("c", "Ask", {}, 1000.0), capacity=2)
        await store.append("s", events("s", 3, 3), applied=2)
        with pytest.raises(StoreError, match="applied already"):
            await store.append("s", events("s", 4, 4), applied=2)
        with pytest.raises(StoreError, match="#9"):
            await store.append("s", events("s", 4, 4), applied=9)
        with pytest.raises(StoreError, match="never begun"):
            await store.finish_effect("s", "k", result=1)
        await store.begin_effect("s", "k", tool="t", arguments={})
        await store.finish_effect("s", "k", result=1)
        with pytest.raises(StoreError, match="done already"):
            await store.finish_effect("s", "k", result=2)
        if kind.durability is not Durability.ASYNC:  # (async mode defers this refusal)
            await store.acquire("s", "alice", ttl=30)
            await store.acquire("s", "bob", ttl=30, replacing="alice")
            await store.release("s", "bob")
            with pytest.raises(LeaseLost, match="nobody holds it now"):
                await store.append("s", events("s", 4, 4), owner="alice")
        assert (await store.record("s")).last_seq == 3


@pytest.mark.parametrize("bad", [object(), math.nan, {1, 2}])
async def test_an_unserializable_patch_is_refused_before_commit(
    make_store: Callable[..., AnyStore], bad: object
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        patch = {"set": {"fine": 1, "broken": bad}}
        with pytest.raises(UnserializablePatch) as caught:
            await store.append("s", [event("s", 1, patch=patch)])
        assert caught.value.field == "broken"
        with pytest.raises(StoreError, match="snapshot"):
            await store.append("s", events("s", 1, 1), snapshot=(1, {"x": bad}))
        with pytest.raises(StoreError, match="I/O record"):
            await store.append("s", [event("s", 1, io=bad)])
        with pytest.raises(StoreError, match="initial snapshot"):
            await store.create_session("t", machine="m", snapshot=bad)
        assert await store.history("s") == ()
        await store.append("s", events("s", 1, 1))


async def test_an_event_of_another_session_is_a_caller_error(
    make_store: Callable[..., AnyStore],
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(ConfigurationError, match="'t'"):
            await store.append("s", [event("t", 1)])


async def test_calls_outside_the_async_with_name_the_state(
    make_store: Callable[..., AnyStore],
) -> None:
    store = make_store()
    with pytest.raises(StoreError, match="is new; enter it first"):
        await store.sessions()
    async with store:
        with pytest.raises(StoreError, match="open already"):
            await store.__aenter__()
    with pytest.raises(StoreError, match="is closed"):
        await store.append("s", [])
    with pytest.raises(StoreError, match="cannot reopen"):
        await store.__aenter__()


async def test_concurrent_appends_of_many_sessions_all_land(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    sessions = [f"s{i}" for i in range(50)]

    async def drive(sid: str) -> None:
        await store.create_session(sid, machine="m", snapshot={"sid": sid})
        for seq in range(1, 11):
            snapshot = (seq, {"seq": seq}) if seq % 5 == 0 else None
            await store.append(sid, [event(sid, seq)], snapshot=snapshot)

    async with make_store() as store:
        async with anyio.create_task_group() as tg:
            for sid in sessions:
                tg.start_soon(drive, sid)
        for sid in sessions:
            assert await store.history(sid) == tuple(events(sid, 1, 10))
            assert (await store.load(sid)).snapshot_seq == 10
        stats = store.statistics()
        assert stats.appended == 500
        assert stats.pending == 0
        if kind.sqlite:
            assert stats.largest_batch > 1
            assert stats.transactions < 500 + 50


async def test_small_batches_and_a_small_queue_still_acknowledge_everyone(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    if not kind.sqlite:
        pytest.skip("batch_max and max_pending are SQLiteStore's")
    sessions = [f"s{i}" for i in range(30)]

    async def drive(sid: str) -> None:
        for seq in range(1, 4):
            await store.append(sid, [event(sid, seq)])

    async with make_store(batch_max=4, max_pending=8) as store:
        for sid in sessions:
            await store.create_session(sid, machine="m", snapshot={})
        async with anyio.create_task_group() as tg:
            for sid in sessions:
                tg.start_soon(drive, sid)
        for sid in sessions:
            assert await store.history(sid) == tuple(events(sid, 1, 3))
        stats = store.statistics()
        assert (stats.appended, stats.pending) == (90, 0)
        assert 1 < stats.largest_batch <= 4


async def test_a_lone_append_is_one_transaction(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    if not kind.sqlite or kind.durability is Durability.ASYNC:
        pytest.skip("a committed write transaction per acknowledged append: SQLite, not async")
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        before = store.statistics().transactions
        for seq in range(1, 6):
            await store.append("s", [event("s", seq)])
        assert store.statistics().transactions - before == 5
        assert await store.history("s") == tuple(events("s", 1, 5))


async def test_a_refused_write_does_not_take_its_batch_down(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    outcomes: dict[str, str] = {}

    async def write(sid: str, seq: int) -> None:
        try:
            await store.append(sid, [event(sid, seq)])
        except DuplicateEvent:
            outcomes[sid] = "refused"
        else:
            outcomes[sid] = "ok"

    async with make_store() as store:
        for i in range(20):
            await store.create_session(f"s{i}", machine="m", snapshot={})
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(write, f"s{i}", 1 if i % 3 else 2)
        for i in range(20):
            expected = "ok" if i % 3 else "refused"
            assert outcomes[f"s{i}"] == expected
            assert len(await store.history(f"s{i}")) == (1 if i % 3 else 0)
        if kind.sqlite:
            assert store.statistics().largest_batch > 1


async def test_leases_one_owner_at_a_time(make_store: Callable[..., AnyStore], kind: Kind) -> None:
    if kind.postgres:
        pytest.skip("PostgresStore's leases run by PostgreSQL's clock (see test_postgres.py)")
    now = [1000.0]
    async with make_store(clock=lambda: now[0]) as store:
        await store.acquire("s", "alice", ttl=30)
        await store.acquire("s", "alice", ttl=30)  # renewal by the holder
        with pytest.raises(SessionLocked) as caught:
            await store.acquire("s", "bob", ttl=30)
        assert (caught.value.owner, caught.value.expires_at) == ("alice", 1030.0)
        assert caught.value.session_id == "s"
        await store.release("s", "bob")  # not bob's: no effect
        with pytest.raises(SessionLocked):
            await store.acquire("s", "bob", ttl=30)
        now[0] = 1029.0
        with pytest.raises(SessionLocked):
            await store.acquire("s", "bob", ttl=30)
        now[0] = 1030.5  # expired: the owner died
        await store.acquire("s", "bob", ttl=30)
        with pytest.raises(SessionLocked, match="'bob'"):
            await store.acquire("s", "alice", ttl=30)
        await store.release("s", "bob")
        await store.acquire("s", "alice", ttl=30)
        with pytest.raises(ConfigurationError):
            await store.acquire("t", "alice", ttl=0)


async def test_concurrent_lease_writes_share_transactions_and_one_owner_wins(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    won: dict[str, list[str]] = {f"s{i}": [] for i in range(20)}
    locked: list[tuple[str, str, str]] = []

    async def take(sid: str, owner: str) -> None:
        try:
            await store.acquire(sid, owner, ttl=30)
        except SessionLocked as exc:
            locked.append((sid, owner, exc.owner))
        else:
            won[sid].append(owner)

    async with make_store() as store:
        async with anyio.create_task_group() as tg:
            for sid in won:
                tg.start_soon(take, sid, "alice")
                tg.start_soon(take, sid, "bob")
        assert all(len(owners) == 1 for owners in won.values()), won
        assert sorted(locked) == sorted(
            (sid, "bob" if owners == ["alice"] else "alice", owners[0])
            for sid, owners in won.items()
        )
        before = store.statistics().transactions
        async with anyio.create_task_group() as tg:
            for sid, owners in won.items():
                tg.start_soon(store.release, sid, owners[0])
        if kind.sqlite:
            assert store.statistics().transactions - before < len(won)
        for sid, owners in won.items():  # released: the other owner takes it at once
            await store.acquire(sid, "carol" if owners[0] != "carol" else "dave", ttl=30)


async def test_async_mode_commits_the_queue_on_exit_and_on_cancel(tmp_path: Path) -> None:
    path = tmp_path / "async.db"
    async with SQLiteStore(path, durability=Durability.ASYNC) as store:
        await store.create_session("s", machine="m", snapshot={})
        for seq in range(1, 101):
            await store.append("s", [event("s", seq)])
        assert store.statistics().pending > 0  # acknowledged before the writer caught up
    with anyio.CancelScope() as scope:
        async with SQLiteStore(path, durability=Durability.ASYNC) as store:
            for seq in range(101, 201):
                await store.append("s", [event("s", seq)])
            scope.cancel()
            await anyio.sleep_forever()
    async with SQLiteStore(path) as store:
        assert [e.seq for e in await store.history("s")] == list(range(1, 201))


async def test_async_mode_reads_its_own_writes_and_refuses_early(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "a.db", durability=Durability.ASYNC) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.append("s", events("s", 1, 3))
        with pytest.raises(DuplicateEvent):
            await store.append("s", [event("s", 3)])
        assert (await store.load("s")).record.last_seq == 3
    async with SQLiteStore(tmp_path / "a.db", durability=Durability.ASYNC) as store:
        with pytest.raises(DuplicateEvent):  # not in the cache: read from the file
            await store.append("s", [event("s", 2)])
        with pytest.raises(SessionNotFound):
            await store.append("t", [event("t", 1)])


def pragmas() -> Script[tuple[Rows, Rows]]:
    synchronous = yield ("PRAGMA synchronous", (), False)
    journal = yield ("PRAGMA journal_mode", (), False)
    return synchronous, journal


@pytest.mark.parametrize(
    ("durability", "level"),
    [(Durability.SYNC, 2), (Durability.BATCHED, 1), (Durability.ASYNC, 1)],
)
async def test_the_synchronous_level_matches_the_mode(
    tmp_path: Path, durability: Durability, level: int
) -> None:
    async with SQLiteStore(tmp_path / "s.db", durability=durability) as store:
        writer = store._writer
        assert writer is not None
        assert await writer.run_script(pragmas()) == ([(level,)], [("wal",)])


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteStore(tmp_path / "x.db", batch_max=0)
    with pytest.raises(ConfigurationError):
        SQLiteStore(tmp_path / "x.db", driver="odbc")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        SQLiteStore(tmp_path / "x.db", durability="sync")  # type: ignore[arg-type]


@pytest.mark.skipif(not HAVE_AIOSQLITE, reason=NO_AIOSQLITE)
async def test_aiosqlite_runs_on_asyncio_only(tmp_path: Path, anyio_backend: str) -> None:
    store = SQLiteStore(tmp_path / "x.db", driver="aiosqlite")
    if anyio_backend == "asyncio":
        async with store:
            await store.create_session("s", machine="m", snapshot={})
    else:
        with pytest.raises(ConfigurationError, match="asyncio only, not trio"):
            await store.__aenter__()
        assert store.state is StoreState.CLOSED


async def test_the_aiosqlite_driver_without_its_extra_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the package were not installed: its import fails, and nothing is found.
    monkeypatch.setitem(sys.modules, "aiosqlite", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'arkhon-rheo\[aiosqlite\]'"):
        SQLiteStore(tmp_path / "x.db", driver="aiosqlite")
    # The default driver needs nothing of it.
    async with SQLiteStore(tmp_path / "x.db") as store:
        await store.create_session("s", machine="m", snapshot={})


async def test_a_value_sqlite_cannot_take_fails_only_its_own_write(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    if not kind.sqlite or kind.durability is Durability.ASYNC:
        pytest.skip("MemoryStore keeps any int; async mode defers the refusal")
    outcomes: dict[str, str] = {}

    async def write(sid: str) -> None:
        attempt = 2**70 if sid == "s3" else 1  # past SQLite's 64-bit integers
        try:
            await store.append(sid, [event(sid, 1, attempt=attempt)])
        except StoreError as exc:
            outcomes[sid] = str(exc)
        else:
            outcomes[sid] = "ok"

    async with make_store() as store:
        for i in range(8):
            await store.create_session(f"s{i}", machine="m", snapshot={})
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(write, f"s{i}")
        assert ("out of range" if kind.postgres else "refused a value") in outcomes.pop("s3")
        assert set(outcomes.values()) == {"ok"}
        await store.append("s3", [event("s3", 1)])  # the connection is not left mid-transaction
        assert [e.seq for e in await store.history("s3")] == [1]
        assert store.statistics().pending == 0


async def test_a_write_in_flight_when_the_store_closes_is_committed(
    tmp_path: Path, anyio_backend: str
) -> None:
    path = tmp_path / "store.db"
    outcome: list[str] = []
    async with SQLiteStore(path, durability=Durability.SYNC) as store:
        await store.create_session("s", machine="m", snapshot={})
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        store = SQLiteStore(path, durability=Durability.SYNC)
        async with anyio.create_task_group() as tg, store:
            begins = WriterBegins(store)
            blocker.execute("BEGIN IMMEDIATE")  # the write waits for this lock

            async def write() -> None:
                await store.append("s", [event("s", 1)])
                outcome.append("acknowledged")

            tg.start_soon(write)
            await begins.wait()  # the writer took it and waits for the lock
            blocker.execute("COMMIT")
            # leaving the store waits for the write to finish before closing
    finally:
        blocker.close()
    assert outcome == ["acknowledged"]
    async with SQLiteStore(path) as store:
        assert [e.seq for e in await store.history("s")] == [1]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_native_asyncio_cancel_abandons_the_wait_never_the_transaction(
    tmp_path: Path,
) -> None:
    import asyncio  # this test is about asyncio's own cancellation

    path = tmp_path / "store.db"
    async with SQLiteStore(path, durability=Durability.SYNC) as store:
        for sid in ("s", "t"):
            await store.create_session(sid, machine="m", snapshot={})
        begins = WriterBegins(store)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            task = asyncio.ensure_future(store.append("s", [event("s", 1)]))
            await begins.wait()  # the writer took it and waits for the lock
            task.cancel()  # anyio's shield does not stop this one
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        await store.append("t", [event("t", 1)])
        assert store.statistics().pending == 0
        assert [e.seq for e in await store.history("t")] == [1]
        assert [e.seq for e in await store.history("s")] == [1]  # committed, unacknowledged


async def test_a_caller_cancelled_in_a_shared_batch_leaves_the_others_acknowledged(
    tmp_path: Path, anyio_backend: str
) -> None:
    path = tmp_path / "store.db"
    acknowledged: list[str] = []
    async with SQLiteStore(path, durability=Durability.SYNC) as store:
        for sid in ("s", "t", "u"):
            await store.create_session(sid, machine="m", snapshot={})

        async def write(sid: str) -> None:
            await store.append(sid, [event(sid, 1)])
            acknowledged.append(sid)

        cancelled = anyio.CancelScope()
        gone = anyio.Event()

        async def write_cancelled() -> None:
            with cancelled:
                await write("t")
            gone.set()

        begins = WriterBegins(store)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the first batch waits for this lock
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(write, "s")
                await begins.wait()  # s's batch is taken: it waits for the lock
                tg.start_soon(write_cancelled)  # t and u share the next batch
                tg.start_soon(write, "u")
                while store.statistics().pending < 3:
                    await anyio.lowlevel.checkpoint()
                cancelled.cancel()
                await gone.wait()
                blocker.execute("COMMIT")
        finally:
            blocker.close()
        assert sorted(acknowledged) == ["s", "u"]
        assert store.statistics().pending == 0
        for sid in ("s", "t", "u"):  # t's too: committed, unacknowledged
            assert [e.seq for e in await store.history(sid)] == [1]


# The forms of the conformance suite (empty, set, append-then-set, list, text, None) run
# there on every store; these are the codec's edge forms on top of them.
@pytest.mark.parametrize(
    "patch",
    [
        {"append": {"x": [1, 2], "y": [[3]]}},
        {"set": {"a": "ü"}, "append": {"b": [2]}},
        {"set": {}},
        {"append": {"x": 1}},
        {"other": 1},
    ],
    ids=repr,
)
async def test_a_patch_of_any_form_reads_back_as_stored(
    make_store: Callable[..., AnyStore], patch: Any
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.append("s", [event("s", 1, patch=patch)])
        (stored,) = await store.history("s")
        loaded = await store.load("s")
    assert stored == loaded.events[0] == event("s", 1, patch=patch)
    assert json.dumps(stored.patch) == json.dumps(patch)  # key order too


async def test_a_large_snapshot_is_kept_compressed_and_reads_back_whole(
    make_store: Callable[..., AnyStore], kind: Kind, tmp_path: Path
) -> None:
    state = {"notes": [{"n": i, "text": "the same words again"} for i in range(200)]}
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot=state)
        assert (await store.load("s")).snapshot == state
        assert await store.snapshot_at("s", 0) == (0, state)
    if kind.sqlite and not kind.postgres:
        with contextlib.closing(sqlite3.connect(tmp_path / "store.db")) as db:
            (value,) = db.execute("SELECT state FROM snapshots").fetchone()
        assert isinstance(value, bytes)
        assert len(value) < len(json.dumps(state)) / 5


async def test_snapshot_json_from_pydantic_is_kept_as_written(
    make_store: Callable[..., AnyStore],
) -> None:
    # The supervisor's own snapshots: written without being parsed again, read back whole.
    state = {"notes": [{"n": i} for i in range(300)], "title": "déjà vu"}
    encoded = EncodedJson(json.dumps(state, separators=(",", ":")).encode())
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot=encoded)
        await store.append("s", [event("s", 1)], snapshot=(1, encoded))
        assert await store.snapshot_at("s", 0) == (0, state)
        assert await store.snapshot_at("s", 1) == (1, state)
