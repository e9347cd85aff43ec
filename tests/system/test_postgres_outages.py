"""PostgreSQL outages: a server that never answers, one frozen mid-run, dropped connections.

Against real servers: a socket on 127.0.0.1 that accepts and never answers, a
throwaway PostgreSQL server of the test's own that it freezes (``SIGSTOP``, as
a partition looks) and thaws, and ``pg_terminate_backend`` on the test run's
server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from arkhon_rheo import AgentSystem, ExitReason
from arkhon_rheo.errors import StoreUnavailable
from arkhon_rheo.store import PostgresStore
from tests.support.work_machine import COUNTER, Counting, check_history

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.anyio
pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")


@pytest.fixture
def silent_url() -> Iterator[str]:
    """The URL of a server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"postgresql://app:pw@127.0.0.1:{server.getsockname()[1]}/agents"
    finally:
        stop.set()
        thread.join()
        server.close()
        for each in held:
            each.close()


async def test_a_server_that_never_answers_fails_the_open_within_the_connect_timeout(
    silent_url: str,
) -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        async with PostgresStore(silent_url, connect_timeout=2.0):
            pass  # pragma: no cover
    assert time.monotonic() - started < 2.0 + 5.0


async def test_a_move_on_after_around_opening_a_silent_server_fires(silent_url: str) -> None:
    store = PostgresStore(silent_url, connect_timeout=60.0)
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await store.__aenter__()
    assert scope.cancelled_caught
    assert time.monotonic() - started < 5.0


def _server_pids(server: Any) -> list[int]:
    """The server's postmaster and every process it started."""
    postmaster = int((Path(server.root) / "data" / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry.name))
    return pids


def _signal_all(server: Any, signum: int) -> None:
    for pid in _server_pids(server):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


@pytest.fixture
def own_server(postgres_server: Any) -> Iterator[Any]:
    """A throwaway PostgreSQL server of the test's own (it may be frozen), thawed and stopped."""
    from arkhon_rheo.testing import start_postgres

    server = start_postgres(postgres_server.bindir)
    try:
        yield server
    finally:
        _signal_all(server, signal.SIGCONT)
        server.stop()


async def test_leaving_a_system_whose_server_froze_mid_run_is_bounded(own_server: Any) -> None:
    store = PostgresStore(own_server.url, connect_timeout=2.0, statement_timeout=1.0)
    async with store:
        system = AgentSystem(store=store)
        async with system:
            for n in range(4):
                await system.start(
                    COUNTER, Counting(target=10_000, step_for=0.01), session_id=f"s{n}"
                )
            await anyio.sleep(0.3)
            await anyio.to_thread.run_sync(_signal_all, own_server, signal.SIGSTOP)
            await anyio.sleep(0.2)
            started = time.monotonic()
        left_system = time.monotonic() - started
        # The store's own exit is bounded too (connect timeout plus the statement limit).
    left_store = time.monotonic() - started
    # The statement under way when the server froze waits out the watchdog's limit
    # (1.5 s); the writes queued behind it, and those the sessions' exits add, are
    # refused at once then (the server is not asked again for RETRY_AFTER), not one
    # connect timeout each: it used to take 10 s (the sessions' status timeout), and
    # the store 3.5 s more. Margins for a loaded machine.
    assert left_system < 1.5 + 2.5, left_system
    assert left_store - left_system < 1.5, left_store - left_system
    await anyio.to_thread.run_sync(_signal_all, own_server, signal.SIGCONT)


async def test_a_store_whose_server_froze_and_thawed_writes_again(own_server: Any) -> None:
    from arkhon_rheo.store._postgres_writer import RETRY_AFTER

    store = PostgresStore(own_server.url, connect_timeout=2.0, statement_timeout=1.0)
    async with store, AgentSystem(store=store) as system:
        handle = await system.start(
            COUNTER, Counting(target=10_000, step_for=0.01), session_id="frozen"
        )
        await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(_signal_all, own_server, signal.SIGSTOP)
        result = await handle.result()  # its write is cut by the watchdog: stopped resumable
        assert result.exit_reason is ExitReason.CANCELLED, result
        await anyio.to_thread.run_sync(_signal_all, own_server, signal.SIGCONT)
        await anyio.sleep(RETRY_AFTER + 0.2)
        after = await system.run(COUNTER, Counting(target=3), session_id="thawed")
        assert after.exit_reason is ExitReason.FINISHED, after.failure
        resumed = await system.resume(COUNTER, "frozen")  # from its last commit
        resumed.cancel()
        assert (await store.record("thawed")).status == "finished"


def _terminate_backends(url: str) -> int:
    """End every other connection to ``url``'s database (waiting until each is gone)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


async def test_sessions_whose_connections_are_dropped_stop_resumable_and_resume(
    postgres_url: str,
) -> None:
    ids = [f"s{n}" for n in range(8)]
    async with PostgresStore(postgres_url) as store, AgentSystem(store=store) as system:
        handles = [
            await system.start(COUNTER, Counting(target=60, step_for=0.005), session_id=sid)
            for sid in ids
        ]
        for _ in range(3):
            await anyio.sleep(0.15)
            await anyio.to_thread.run_sync(_terminate_backends, postgres_url)
        results = [await handle.result() for handle in handles]
        stopped = []
        for result in results:
            # Never failed: finished, or stopped resumable (its record still running).
            assert result.exit_reason in {ExitReason.FINISHED, ExitReason.CANCELLED}, result
            if result.exit_reason is ExitReason.CANCELLED:
                record = await store.record(result.session_id)
                assert record.status == "running"
                stopped.append(result.session_id)
        for sid in stopped:
            resumed = await system.resume(COUNTER, sid)
            assert (await resumed.result()).exit_reason is ExitReason.FINISHED
        for sid in ids:
            stored = system.stored(COUNTER, sid)
            assert (await stored.record()).status == "finished"
            # Each step committed once: every n written once, in order.
            check_history(await stored.history(), await stored.state())
            assert (await stored.state()).n == 60


async def test_a_new_session_runs_after_the_idle_connections_are_dropped(
    postgres_url: str,
) -> None:
    async with PostgresStore(postgres_url) as store, AgentSystem(store=store) as system:
        first = await system.run(COUNTER, Counting(target=2), session_id="first")
        assert first.exit_reason is ExitReason.FINISHED
        assert await anyio.to_thread.run_sync(_terminate_backends, postgres_url) > 0
        await anyio.sleep(1.2)  # idle past the writer's check
        second = await system.run(COUNTER, Counting(target=2), session_id="second")
        assert second.exit_reason is ExitReason.FINISHED, second.failure
        assert (await store.record("second")).status == "finished"


async def test_a_write_right_after_the_connections_are_dropped_runs_on_a_new_one(
    postgres_url: str,
) -> None:
    # Dropped well within the writer's idle check (1 s), the connection is found dead
    # only by the next batch's first statement. Nothing of that transaction was sent
    # to COMMIT, so the writer runs it again on a new connection instead of failing it.
    async with PostgresStore(postgres_url) as store, AgentSystem(store=store) as system:
        first = await system.run(COUNTER, Counting(target=2), session_id="first")
        assert first.exit_reason is ExitReason.FINISHED
        for round_ in range(3):
            assert await anyio.to_thread.run_sync(_terminate_backends, postgres_url) > 0
            await anyio.sleep(0.05)  # the backends gone, the writer's check not yet due
            again = await system.run(COUNTER, Counting(target=2), session_id=f"next{round_}")
            assert again.exit_reason is ExitReason.FINISHED, again.failure
            assert (await store.record(f"next{round_}")).status == "finished"


def _pg_ctl(server: Any, *args: str) -> None:
    import subprocess

    data = str(server.root / "data")
    command = [*server.prefix, f"{server.bindir}/pg_ctl", "-D", data, *args]
    subprocess.run(command, capture_output=True, check=True, timeout=60)


async def test_a_store_whose_server_restarted_writes_again_at_once(own_server: Any) -> None:
    # A connection refused at once (the server restarting) is no silence: unlike a
    # connect that timed out, it does not keep the writes of the next second away.
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={own_server.port} "
        f"-c unix_socket_directories={own_server.root}"
    )
    log = str(own_server.root / "log")
    async with PostgresStore(own_server.url, connect_timeout=2.0) as store:
        await store.create_session("before", machine="m", snapshot={"n": 0})
        await anyio.to_thread.run_sync(_pg_ctl, own_server, "-m", "fast", "-w", "stop")
        for n in range(2):  # the first finds its connection dropped, the second is refused
            with pytest.raises(StoreUnavailable):
                await store.create_session(f"down{n}", machine="m", snapshot={"n": 0})
        await anyio.to_thread.run_sync(_pg_ctl, own_server, "-o", options, "-l", log, "-w", "start")
        await store.create_session("after", machine="m", snapshot={"n": 0})  # not refused
        assert (await store.record("after")).status == "running"
