"""What only `PostgresStore` does: work queue (SKIP LOCKED, LISTEN/NOTIFY), schema, secrets.

The store protocol's common behaviour runs on it through tests/store/conftest.py's
``postgres`` kind. These start a throwaway server (`arkhon_rheo.testing.start_postgres`) and
skip, saying why, where no PostgreSQL binaries are found.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import psycopg
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, StoreError
from arkhon_rheo.errors import LeaseLost, StoreCorrupt, StoreUnavailable
from arkhon_rheo.protocols import Durability, NewMessage
from arkhon_rheo.store import PostgresStore
from tests.store.test_store import event

pytestmark = pytest.mark.anyio
T0 = 1000.0


def _ask(message_id: str, due_at: float = T0, kind: str = "Ask") -> NewMessage:
    return NewMessage(message_id, kind, {"text": message_id}, due_at)


async def test_two_workers_never_claim_the_same_session(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as one, PostgresStore(postgres_url) as two:
        for i in range(40):
            await one.create_session(f"s{i}", machine="m", snapshot={})
        await one.create_session("other", machine="elsewhere", snapshot={})
        await one.create_session("paused", machine="m", snapshot={}, status="paused")
        claimed: dict[str, list[str]] = {"one": [], "two": []}

        async def claim(store: PostgresStore, owner: str) -> None:
            while records := await store.claim(owner, machines=["m"], limit=3, ttl=60, now=T0):
                claimed[owner].extend(r.session_id for r in records)

        async with anyio.create_task_group() as tg:
            tg.start_soon(claim, one, "one")
            tg.start_soon(claim, two, "two")
        every = claimed["one"] + claimed["two"]
        assert sorted(every) == sorted(f"s{i}" for i in range(40))  # each exactly once
        leases = {lease.session_id: lease.owner for lease in await one.leases()}
        assert all(leases[sid] == owner for owner in claimed for sid in claimed[owner])
        # A claimed session commits under its token; the other worker is fenced off.
        sid = claimed["one"][0]
        await one.append(sid, [event(sid, 1)], owner="one")
        with pytest.raises(LeaseLost):
            await two.append(sid, [event(sid, 2)], owner="two")


async def test_a_waiting_session_is_claimed_once_due_and_a_lapsed_lease_again(
    postgres_url: str,
) -> None:
    async with PostgresStore(postgres_url) as store:
        await store.create_session("w", machine="m", snapshot={})
        assert await store.park("w", None, status="waiting", waiting=None, accepts=["Ask"], now=T0)
        assert await store.claim("a", machines=["m"], limit=5, ttl=60, now=T0) == ()
        await store.post("w", _ask("x", T0 + 5, kind="Other"), capacity=5)  # not taken: no wake
        assert (await store.record("w")).wake_at is None
        await store.post("w", _ask("y", T0 + 5), capacity=5)
        assert (await store.record("w")).wake_at == T0 + 5
        assert await store.claim("a", machines=["m"], limit=5, ttl=60, now=T0) == ()
        (record,) = await store.claim("a", machines=["m"], limit=5, ttl=60, now=T0 + 5)
        assert record.session_id == "w"
        # Held: nobody else claims it; once its lease runs out (by PostgreSQL's clock),
        # another worker does, under a new fencing token.
        assert await store.claim("b", machines=["m"], limit=5, ttl=60, now=T0 + 5) == ()
        await store.acquire("w", "a", ttl=0.05)
        while await store.leases():  # noqa: ASYNC110 - PostgreSQL's clock, not an event
            await anyio.sleep(0.01)
        await store.append("w", [event("w", 1)], owner="a")  # ran out, not taken: commits
        (again,) = await store.claim("b", machines=["m"], limit=5, ttl=60, now=T0 + 5)
        assert again.session_id == "w"
        with pytest.raises(LeaseLost):
            await store.append("w", [event("w", 2)], owner="a")


async def test_wait_for_work_wakes_on_a_post_from_another_store(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as worker, PostgresStore(postgres_url) as service:
        await service.create_session("s", machine="m", snapshot={})
        await worker.claim("w", machines=["m"], limit=5, ttl=60, now=T0)  # listens from here
        woke = anyio.Event()

        async def wait() -> None:
            await worker.wait_for_work(timeout=3600)
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            # (Listening since the claim: a notification sent before the wait is kept.)
            await service.post("s", _ask("hello"), capacity=5)
            with anyio.fail_after(30):
                await woke.wait()
        # No news: it waits out its timeout.
        await worker.wait_for_work(timeout=0.01)


async def test_the_password_never_shows(postgres_server: Any, anyio_backend: Any) -> None:
    secret = "hunter2-very-secret"
    role = f"app_{str(anyio_backend)[:5].strip('(').strip(chr(39))}"
    with psycopg.connect(postgres_server.url, autocommit=True) as connection:
        if not connection.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchall():
            connection.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'")
    url = f"postgresql://{role}:{secret}@127.0.0.1:{postgres_server.port}/postgres"
    store = PostgresStore(url)
    assert secret not in repr(store)
    assert secret not in store.location
    assert "[REDACTED]" in store.location
    wrong = f"postgresql://{role}:{secret}-wrong@127.0.0.1:{postgres_server.port}/postgres"
    with pytest.raises(StoreError) as caught:
        async with PostgresStore(wrong):
            pass
    chain: list[BaseException] = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    for link in chain:
        assert secret not in str(link)
        assert secret not in repr(link.args)
    assert "password authentication failed" in str(caught.value)
    with pytest.raises(ConfigurationError) as bad:
        PostgresStore(f"mysql://app:{secret}@host/db")
    assert secret not in str(bad.value)


async def test_without_psycopg_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigurationError, match=r'pip install "arkhon-rheo\[postgres\]"'):
        PostgresStore("postgresql://u:p@127.0.0.1/db")
    with pytest.raises(ConfigurationError, match="arkhon-rheo"):
        AgentSystem(store="postgresql://u:p@127.0.0.1/db")


async def test_concurrent_first_opens_and_a_foreign_or_newer_schema(postgres_url: str) -> None:
    async def open_one() -> None:
        async with PostgresStore(postgres_url, schema="shared") as store:
            await store.sessions()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(open_one)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE shared.meta SET value = '99' WHERE key = 'schema_version'")
        connection.execute("CREATE SCHEMA theirs; CREATE TABLE theirs.orders (id int)")
    with pytest.raises(StoreCorrupt, match="schema version 99"):
        async with PostgresStore(postgres_url, schema="shared"):
            pass
    with pytest.raises(StoreCorrupt, match="another application"):
        async with PostgresStore(postgres_url, schema="theirs"):
            pass
    with pytest.raises(ConfigurationError, match="plain PostgreSQL name"):
        PostgresStore(postgres_url, schema='x"; DROP TABLE y')


async def test_an_agent_system_on_postgres_recovers_in_a_second_system(postgres_url: str) -> None:
    from arkhon_rheo.testing import ReferenceState
    from tests.system.test_durable import Control, notes_machine

    first = Control(block_at=2)
    async with AgentSystem(store=postgres_url) as system:
        await system.start(notes_machine(first), ReferenceState(), session_id="n")
        await first.blocked.wait()
    second = Control()
    machine = notes_machine(second)
    async with AgentSystem(path=postgres_url) as system:
        handle = await system.resume(machine, "n")
        result = await handle.result()
        history = await system.stored(machine, "n").history()
    assert result.ok
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    assert len(result.state.steps) == 3


async def test_the_writer_reconnects_after_postgres_drops_its_connection(
    postgres_url: str,
) -> None:
    async with PostgresStore(postgres_url) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.append("s", [event("s", 1)])
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        # A read meets only dropped pooled connections at first: it goes on to a new one.
        assert [e.seq for e in await store.history("s")] == [1]
        try:
            await store.append("s", [event("s", 2)])  # may find the connection dropped
        except StoreUnavailable:  # (a session's run meeting it stops, resumable)
            await store.append("s", [event("s", 2)])  # refused, nothing written: again
        await store.append("s", [event("s", 3)])
        assert [e.seq for e in await store.history("s")] == [1, 2, 3]


@pytest.mark.parametrize("mode", list(Durability), ids=[m.value for m in Durability])
async def test_each_durability_mode_commits_everything_it_acknowledged(
    postgres_url: str, mode: Durability
) -> None:
    # (The whole store suite runs on BATCHED; SYNC and ASYNC were run on it by hand too.)
    async with PostgresStore(postgres_url, durability=mode) as store:
        for i in range(20):
            await store.create_session(f"s{i}", machine="m", snapshot={})
        before = store.statistics().transactions

        async def write(sid: str) -> None:
            for seq in range(1, 6):
                await store.append(sid, [event(sid, seq)], owner=None)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(write, f"s{i}")
        for i in range(20):  # read your writes (ASYNC: the queue is committed first)
            assert [e.seq for e in await store.history(f"s{i}")] == [1, 2, 3, 4, 5]
        stats = store.statistics()
        assert (stats.appended, stats.pending) == (100, 0)
        if mode is Durability.SYNC:  # no grouping: one transaction per append
            assert stats.largest_batch == 1
            assert stats.transactions - before == 100
    async with PostgresStore(postgres_url) as again:  # and it is all in PostgreSQL
        assert {r.last_seq for r in await again.sessions()} == {5}


async def test_a_cancelled_wait_for_work_lets_the_store_close(postgres_url: str) -> None:
    with anyio.fail_after(60):  # (a hang guard: closing waits for one slice at most)
        async with PostgresStore(postgres_url) as store:
            started = anyio.Event()

            async def wait() -> None:
                started.set()
                await store.wait_for_work(timeout=3600)

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await started.wait()
                await anyio.sleep(0.1)  # (let its thread begin to wait)
                tg.cancel_scope.cancel()
            # The store still works, and wakes on news as before.
            await store.create_session("s", machine="m", snapshot={})
            await store.wait_for_work(timeout=3600)  # the create's notification


def test_a_password_in_the_query_is_masked_too() -> None:
    from arkhon_rheo._redact import scrub_secrets
    from arkhon_rheo.store._postgres_conn import redacted_url

    shown = redacted_url("postgresql://db.internal/agents?user=app&password=qu3ry-secret")
    assert "qu3ry-secret" not in shown
    assert "user=app" in shown
    assert scrub_secrets("dsn password=qu3ry-secret") == "dsn password=[REDACTED]"
    store = PostgresStore("postgres://app:p%40ss-w0rd@db.internal/agents")
    assert "p%40ss-w0rd" not in repr(store)
    assert "p@ss-w0rd" not in scrub_secrets("the password is p@ss-w0rd")


async def test_an_older_schema_is_upgraded_when_opened(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arkhon_rheo.store import _postgres_schema

    async with PostgresStore(postgres_url) as store:
        await store.create_session("s", machine="m", snapshot={"v": 1})
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE arkhon_rheo.meta SET value = '0' WHERE key = 'schema_version'")
    # A version 0 -> 1 step, as a future version's would be: run once, in the open's transaction.
    monkeypatch.setattr(_postgres_schema, "_UPGRADES", {0: ("CREATE TABLE upgraded (x integer)",)})
    async with PostgresStore(postgres_url) as store:
        assert (await store.load("s")).snapshot == {"v": 1}
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        (version,) = connection.execute(
            "SELECT value FROM arkhon_rheo.meta WHERE key = 'schema_version'"
        ).fetchone() or ("",)
        assert version == "1"
        found = connection.execute("SELECT to_regclass('arkhon_rheo.upgraded')::text").fetchone()
        assert found == ("arkhon_rheo.upgraded",)  # in the store's schema


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), float("nan")])
def test_a_transaction_idle_timeout_out_of_range_is_a_clear_error(timeout: float) -> None:
    with pytest.raises(ConfigurationError, match="transaction_idle_timeout must be"):
        PostgresStore("postgresql://app@host/db", transaction_idle_timeout=timeout)


async def test_a_transaction_left_idle_is_ended_and_its_row_locks_freed(postgres_url: str) -> None:
    # A worker paused inside a transaction would keep its sessions from the others.
    import time

    import anyio.to_thread
    import psycopg

    async with PostgresStore(postgres_url, transaction_idle_timeout=0.2) as store:
        await store.create_session("s", machine="m", snapshot={})

        def paused_in_a_transaction() -> None:
            connection = store._connect(writer=False)
            try:
                connection.execute("BEGIN")
                connection.execute("SELECT 1 FROM sessions FOR UPDATE")  # its row, locked
                ended = None
                while ended is None:  # idle in its transaction until the server ends it
                    time.sleep(0.3)
                    try:
                        connection.execute("SELECT 1")
                    except psycopg.errors.IdleInTransactionSessionTimeout as exc:
                        ended = exc
            finally:
                connection.close()

        await anyio.to_thread.run_sync(paused_in_a_transaction)
        claimed = await store.claim("w", machines=["m"], limit=1, ttl=30, now=0.0)
        assert [record.session_id for record in claimed] == ["s"]
