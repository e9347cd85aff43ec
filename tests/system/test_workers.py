"""Workers: sessions submitted to a store, driven by whichever worker claims them.

Each test runs on both backends, on a memory store, an SQLite file or a
throwaway PostgreSQL database (two stores on one file or database where two
workers must share it, as two processes would; the PostgreSQL cases skip where
there are no PostgreSQL binaries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
import structlog

from arkhon_rheo import AgentSystem, ConfigurationError, ExitReason, MemoryStore, SQLiteStore
from arkhon_rheo.errors import StoreUnavailable
from arkhon_rheo.react import react_agent
from arkhon_rheo.store import PostgresStore
from arkhon_rheo.system import Worker
from arkhon_rheo.testing import ScriptedModel, VirtualClock
from tests.support.work_machine import (
    COUNTER,
    Counting,
    Phase,
    Poke,
    arm,
    check_history,
    counter,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable
    from pathlib import Path

    from arkhon_rheo.protocols import Store
    from arkhon_rheo.system import StoredSession

pytestmark = pytest.mark.anyio

#: The statuses of a session that has ended.
ENDED = {"finished", "failed", "max_steps", "aborted", "cancelled", "crashed"}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store lives: ``"memory"``, an SQLite file, or a PostgreSQL URL."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return "memory" if request.param == "memory" else str(tmp_path / "s.db")


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where stores that several workers share live: an SQLite file, or a PostgreSQL URL."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "shared.db")


def make(where: str) -> Store:
    """A new (not yet entered) store on ``where`` (see the `where` fixture)."""
    if where == "memory":
        return MemoryStore()
    if where.startswith("postgresql://"):
        return PostgresStore(where)
    return SQLiteStore(where)


@pytest.fixture
async def store(where: str) -> AsyncIterator[Store]:
    async with make(where) as made:
        yield made


async def until(store: Store, ids: Iterable[str], statuses: set[str] = ENDED) -> None:
    """Wait until every session of ``ids`` has one of ``statuses`` (read from the store)."""
    wanted = set(ids)
    with anyio.fail_after(60):
        while True:
            records = {r.session_id: r.status for r in await store.sessions()}
            if all(records.get(sid) in statuses for sid in wanted):
                return
            await anyio.sleep(0.01)


async def until_state(stored: StoredSession[Counting], check: Callable[[Counting], bool]) -> None:
    """Wait until the stored state of ``stored`` passes ``check``."""
    with anyio.fail_after(60):
        while True:
            if check(await stored.state()):
                return
            await anyio.sleep(0.01)


async def check_all(system: AgentSystem, ids: Iterable[str]) -> None:
    for sid in ids:
        stored = system.stored(COUNTER, sid)
        assert (await stored.record()).status == "finished"
        check_history(await stored.history(), await stored.state())


async def test_a_submitted_session_is_driven_to_its_end_by_a_worker(store: Store) -> None:
    worker = Worker(store, [COUNTER], concurrency=4, poll_interval=0.05)
    async with AgentSystem(store=store) as service, anyio.create_task_group() as group:
        group.start_soon(worker.run)
        ids = [f"s{n}" for n in range(6)]
        for sid in ids:
            stored = await service.submit(COUNTER, Counting(target=3), session_id=sid)
        assert service.sessions() == []  # nothing runs in the service
        await until(store, ids)
        worker.drain()
    async with AgentSystem(store=store) as reader:
        await check_all(reader, ids)
    assert (await stored.state()).n == 3
    assert worker.driven == 6
    assert worker.running == 0


async def test_a_message_and_a_timer_reach_a_parked_session_through_a_worker(
    store: Store,
) -> None:
    clock = VirtualClock()
    worker = Worker(store, [COUNTER], poll_interval=3600, clock=clock)
    async with (
        AgentSystem(store=store, clock=clock) as service,
        anyio.create_task_group() as group,
    ):
        group.start_soon(worker.run)
        state = Counting(target=1, wait_for=2, timer_after=600)
        stored = await service.submit(COUNTER, state, session_id="w")
        await until(store, ["w"], {"waiting"})
        sent = await service.send(COUNTER, "w", Poke(text="hello"), drive=False)
        assert sent.handle is None
        await until(store, ["w"], {"waiting"})
        await until_state(stored, lambda state: state.got == ("hello",))
        clock.advance(600)  # the timer falls due: the worker's idle wait is on this clock
        await until(store, ["w"])
        worker.drain()
    assert (await stored.state()).got == ("hello", "tick")
    async with AgentSystem(store=store) as reader:
        await check_all(reader, ["w"])


async def test_two_workers_on_one_store_never_drive_a_session_twice(shared: str) -> None:
    ids = [f"s{n:02d}" for n in range(30)]
    async with make(shared) as one, make(shared) as two, make(shared) as service_store:
        workers = [
            Worker(store, [COUNTER], concurrency=5, poll_interval=0.05) for store in (one, two)
        ]
        async with (
            AgentSystem(store=service_store) as service,
            anyio.create_task_group() as group,
        ):
            for worker in workers:
                group.start_soon(worker.run)
            for sid in ids:
                await service.submit(COUNTER, Counting(target=4, wait_for=1), session_id=sid)
            await until(service_store, ids, {"waiting"})
            for sid in ids:
                await service.send(COUNTER, sid, Poke(text="go"), drive=False)
            await until(service_store, ids)
            for worker in workers:
                worker.drain()
            await check_all(service, ids)
        # Both took part (each claims at most 5 at a time), and no lease is left.
        assert all(worker.driven > 0 for worker in workers)
        assert await service_store.leases() == ()


async def test_a_drain_hands_a_run_over_at_a_commit_boundary(shared: str) -> None:
    async with make(shared) as first_store, make(shared) as second_store:
        first = Worker(first_store, [COUNTER], poll_interval=0.05)
        second = Worker(second_store, [COUNTER], poll_interval=0.05)
        inside, release = arm()
        async with AgentSystem(store=first_store) as service:
            async with anyio.create_task_group() as group:
                group.start_soon(first.run)
                await service.submit(COUNTER, Counting(target=3), session_id="d")
                with anyio.fail_after(60):
                    await inside.wait()  # the first count step is under way in `first`
                first.drain()
                await anyio.wait_all_tasks_blocked()
                release.set()  # the step finishes and commits; then the run is handed over
            record = await service.stored(COUNTER, "d").record()
            assert (record.status, record.last_seq) == ("running", 3)  # resume, begin, count
            assert await first_store.leases() == ()
            async with anyio.create_task_group() as group:
                group.start_soon(second.run)
                await until(second_store, ["d"])
                second.drain()
            await check_all(service, ["d"])
            history = await service.stored(COUNTER, "d").history()
            resumes = [e.info for e in history if e.kind.value == "resume" and e.info]
            assert [info["previous_status"] for info in resumes] == ["running", "running"]
            assert [info["rerun"] for info in resumes] == ["begin", "count"]


class HeldWaking(MemoryStore):
    """A memory store whose `waking` can be held, as a slow store round trip would be."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: anyio.Event | None = None
        self.entered = anyio.Event()

    async def waking(self, now: float) -> tuple[tuple[Any, ...], float | None]:
        if self.hold is not None:
            self.entered.set()
            await self.hold.wait()
        return await super().waking(now)


async def test_a_drain_hands_a_run_over_while_the_worker_waits_on_the_store() -> None:
    # The serving loop is inside a store round trip (its idle `waking` read) when
    # `drain` is called: the run under way stops at its next commit boundary all
    # the same, not at the first one after that read returns.
    store = HeldWaking()
    async with store:
        worker = Worker(store, [COUNTER], poll_interval=0.01)
        inside, release = arm()
        async with AgentSystem(store=store) as service, anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await service.submit(COUNTER, Counting(target=3), session_id="h")
            with anyio.fail_after(60):
                await inside.wait()  # the first count step is under way in the worker
                store.hold = anyio.Event()
                await store.entered.wait()  # and the serving loop waits on the store
            worker.drain()
            release.set()
            with anyio.fail_after(60):
                while True:  # the run ends at its next commit boundary
                    if not worker.running:
                        break
                    await anyio.sleep(0.01)
            record = await service.stored(COUNTER, "h").record()
            assert (record.status, record.last_seq) == ("running", 3)  # resume, begin, count
            store.hold.set()
        assert await store.leases() == ()


async def test_a_claim_of_a_session_whose_run_here_lost_its_lease_stops_that_run(
    store: Store,
) -> None:
    # Issue 31: a worker's run lost its lease (the worker was paused past it; another
    # took the session, drove it on and gave it up), and the worker claims the session
    # again under its own name: the old run stops, writing nothing more (its writes
    # would carry the new lease), and the session is driven anew from its last commit.
    worker = Worker(store, [COUNTER], lease_ttl=3600, poll_interval=0.05)  # no renewal soon
    inside, release = arm()
    with structlog.testing.capture_logs() as logs:
        async with AgentSystem(store=store) as service, anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await service.submit(COUNTER, Counting(target=3), session_id="c")
            with anyio.fail_after(60):
                await inside.wait()  # its first count step is under way in the worker
            await store.acquire("c", "successor", ttl=60, replacing=worker.owner)
            await store.release("c", "successor")  # the worker's next claim takes it
            await until(store, ["c"])
            release.set()
            worker.drain()
        await check_all(service, ["c"])
    history = await service.stored(COUNTER, "c").history()
    resumes = [e.info for e in history if e.kind.value == "resume" and e.info]
    assert [info["rerun"] for info in resumes] == ["begin", "count"]  # the second run's
    assert [entry["session_id"] for entry in logs if entry["event"] == "session_lease_lapsed"] == [
        "c"
    ]


@pytest.mark.parametrize(
    ("machines", "options", "match"),
    [
        ([], {}, "at least one machine"),
        (["not a machine"], {}, "Machine objects"),
        ([COUNTER, counter()], {}, "two machines are named 'work-counter'"),
        ([COUNTER], {"concurrency": 0}, "concurrency"),
        ([COUNTER], {"poll_interval": -1}, "poll_interval"),
        ([COUNTER], {"drain_timeout": 0}, "drain_timeout"),
    ],
)
async def test_a_worker_refuses_bad_options(
    machines: list[Any], options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Worker(MemoryStore(), machines, **options)


async def test_a_worker_serving_two_unnamed_react_agents_says_to_name_them() -> None:
    triage = react_agent(ScriptedModel(["a"], model="triage-model"))
    billing = react_agent(ScriptedModel(["b"], model="billing-model"))
    with pytest.raises(ConfigurationError) as refused:
        Worker(MemoryStore(), [COUNTER, triage, billing])
    message = str(refused.value)
    assert message.startswith("two machines are named 'react-agent' (#2 <Machine 'react-agent'")
    assert "on ReactState, model ScriptedModel(model='triage-model'" in message
    assert "; #3 <Machine 'react-agent'" in message
    assert "model ScriptedModel(model='billing-model'" in message
    assert "pass name=... to react_agent" in message
    assert "react_agent(model, tools, name='triage')" in message
    Worker(MemoryStore(), [triage, react_agent(ScriptedModel(["b"]), name="billing")])


async def test_a_worker_refuses_a_store_that_is_no_work_queue() -> None:
    class Plain:
        pass

    with pytest.raises(ConfigurationError, match="WorkQueue"):
        Worker(Plain(), [COUNTER])  # type: ignore[arg-type]


async def test_a_worker_runs_once_and_submit_needs_a_store(store: Store) -> None:
    worker = Worker(store, [COUNTER])
    worker.drain()  # before it runs: it returns at once
    await worker.run()
    with pytest.raises(ConfigurationError, match="runs once"):
        await worker.run()
    async with AgentSystem(path=None) as system:
        with pytest.raises(ConfigurationError, match="submit a session"):
            await system.submit(COUNTER, Counting())
    assert Phase.DONE.value == "done"


async def test_a_session_a_worker_cannot_drive_keeps_its_lease_until_it_runs_out(
    store: Store,
) -> None:
    from arkhon_rheo import Machine

    # The same name, another machine: the stored session does not fit it.
    other = Machine(
        name="work-counter",
        state_type=Counting,
        initial=Phase.START,
        transitions={Phase.START: {Phase.DONE}},
        stages={Phase.START: COUNTER.stages[Phase.START]},
        terminal={Phase.DONE, Phase.FAILED},
        failed=Phase.FAILED,
    )
    worker = Worker(store, [other], poll_interval=0.05, lease_ttl=3600)
    async with AgentSystem(store=store) as service, anyio.create_task_group() as group:
        await service.submit(COUNTER, Counting(), session_id="misfit")
        group.start_soon(worker.run)
        with anyio.fail_after(60):
            while True:
                if await store.leases():
                    break
                await anyio.sleep(0.01)
        await anyio.sleep(0.2)  # polls of the worker: the session is not claimed again
        worker.drain()
    (lease,) = await store.leases()
    assert (lease.session_id, lease.owner) == ("misfit", worker.owner)
    assert (await store.record("misfit")).last_seq == 0
    assert worker.driven == 0


async def test_a_worker_idle_on_a_long_poll_is_woken_by_postgres_notifications(
    postgres_url: str,
) -> None:
    # The worker polls once an hour: only LISTEN/NOTIFY can wake it for a session
    # submitted, and then messaged, through another store object (another process's;
    # an SQLite store finds those by polling).
    async with make(postgres_url) as worker_store, make(postgres_url) as service_store:
        worker = Worker(worker_store, [COUNTER], poll_interval=3600)
        async with (
            AgentSystem(store=service_store) as service,
            anyio.create_task_group() as group,
        ):
            group.start_soon(worker.run)
            await until(service_store, [])  # the worker is idle before anything is there
            stored = await service.submit(COUNTER, Counting(target=2, wait_for=1), session_id="n")
            await until(service_store, ["n"], {"waiting"})
            await service.send(COUNTER, "n", Poke(text="wake"), drive=False)
            await until(service_store, ["n"])
            worker.drain()
        assert (await stored.state()).got == ("wake",)
        await check_all(service, ["n"])


def _terminate_backends(url: str) -> int:
    """End every other connection to ``url``'s database, as PostgreSQL ends a starved one."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            # Waits (up to 10 s) for each to be gone: the next write finds its connection so.
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


async def test_a_worker_whose_store_connection_is_dropped_mid_step_does_not_fail_the_session(
    postgres_url: str,
) -> None:
    # Issue 31: PostgreSQL ended a worker's connections (its idle-in-transaction
    # timeout, on a starved machine; a restart) while a step ran. Whether the step's
    # commit meets the dropped connection (the writer retries a batch of several
    # alone, on a new one) is a race: either way the session finishes, never failed.
    async with make(postgres_url) as store:
        worker = Worker(store, [COUNTER], lease_ttl=1.0, poll_interval=0.05)
        inside, release = arm()
        async with AgentSystem(store=store) as service, anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await service.submit(COUNTER, Counting(target=3), session_id="x")
            with anyio.fail_after(60):
                await inside.wait()  # its first count step is under way in the worker
            assert await anyio.to_thread.run_sync(_terminate_backends, postgres_url) > 0
            release.set()  # the step's commit finds its connection gone
            await until(store, ["x"])
            worker.drain()
        async with AgentSystem(store=store) as reader:
            await check_all(reader, ["x"])


def dropping(where: str) -> Any:
    """A store on ``where``: once ``store.drop`` is set, its next append of a ``count`` step fails.

    It fails as a PostgreSQL store's append does when the server dropped its
    connection (`StoreUnavailable`), with nothing of it written.
    """
    base: Any = type(make(where))

    class Dropping(base):  # type: ignore[misc]
        drop = False

        async def append(self, session_id: str, events: Any, **options: Any) -> Any:
            if self.drop and any(event.stage == "count" for event in events):
                self.drop = False
                raise StoreUnavailable("the connection dropped", location="test")
            return await super().append(session_id, events, **options)

    return Dropping() if where == "memory" else Dropping(where)


async def test_a_store_connection_dropped_under_a_step_stops_the_run_resumable(
    where: str,
) -> None:
    # Without a worker: the run stops (cancelled, its failure saying why), the record
    # stays "running" with its lease given up, and `resume` finishes it.
    async with dropping(where) as store, AgentSystem(store=store) as system:
        store.drop = True
        handle = await system.start(COUNTER, Counting(target=3), session_id="y")
        result = await handle.result()
        assert result.exit_reason is ExitReason.CANCELLED
        assert result.failure is not None
        assert result.failure.error_type == "StoreUnavailable"
        assert (await system.stored(COUNTER, "y").record()).status == "running"
        assert await store.leases() == ()
        assert (await (await system.resume(COUNTER, "y")).result()).ok
        await check_all(system, ["y"])


async def test_a_worker_whose_store_drops_a_step_commit_drives_the_session_on(
    where: str,
) -> None:
    # Issue 31: the chaos run's session "ended unfinished after its first message":
    # a commit that met a dropped connection failed the session. Now the run stops,
    # and the worker claims the session again and goes on from its last commit.
    async with dropping(where) as store:
        store.drop = True
        worker = Worker(store, [COUNTER], poll_interval=0.05)
        async with AgentSystem(store=store) as service, anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await service.submit(COUNTER, Counting(target=3), session_id="w")
            await until(store, ["w"])
            worker.drain()
        async with AgentSystem(store=store) as reader:
            await check_all(reader, ["w"])
            history = await reader.stored(COUNTER, "w").history()
    assert not store.drop  # the fault was met
    resumes = [e.info for e in history if e.kind.value == "resume" and e.info]
    assert [info["rerun"] for info in resumes] == ["begin", "count"]  # the second run's
