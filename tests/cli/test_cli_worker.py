"""``arkhon-rheo worker`` processes, and ``demo --workers``.

Two worker processes share a store and drain on SIGTERM (exit 0); a worker
killed with SIGKILL in the middle of a step leaves its sessions to another
once their leases run out, which goes on from their last commit. Each runs on
an SQLite file and on a throwaway PostgreSQL database (skipped where there are
no PostgreSQL binaries).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentSystem, SQLiteStore
from arkhon_rheo.store import PostgresStore
from tests.support.work_machine import COUNTER, Counting, Poke, check_history

if TYPE_CHECKING:
    from collections.abc import Callable

    from arkhon_rheo.protocols import Store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="workers are signalled"),
]

ROOT = str(Path(__file__).resolve().parents[2])
MACHINE = "tests.support.work_machine:COUNTER"


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the processes share: an SQLite file, or a PostgreSQL URL."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "shared.db")


def open_store(where: str) -> Store:
    """A new (not yet entered) store on ``where``."""
    if where.startswith("postgresql://"):
        return PostgresStore(where)
    return SQLiteStore(where)


def start_worker(path: Path | str, out: Path, *options: str, **env: str) -> subprocess.Popen[bytes]:
    """``arkhon-rheo worker`` on ``path`` in a child process, its output in ``out``."""
    python_path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "arkhon_rheo", "worker", "--store", str(path)),
                *("--machine", MACHINE, "--poll", "0.05", *options),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": python_path, **env},
        )


async def eventually(check: Callable[[], bool], limit: float = 60.0) -> None:
    """Wait until ``check()`` holds (a hung child fails after ``limit`` seconds)."""
    with anyio.fail_after(limit):
        while True:
            if check():
                return
            await anyio.sleep(0.05)


async def until_ended(store: Store, ids: list[str]) -> None:
    with anyio.fail_after(120):
        while True:
            statuses = {r.session_id: r.status for r in await store.sessions()}
            if all(statuses.get(sid) == "finished" for sid in ids):
                return
            await anyio.sleep(0.05)


async def test_two_worker_processes_share_the_sessions_and_drain_on_sigterm(
    where: str, tmp_path: Path
) -> None:
    path = where
    outs = [tmp_path / f"w{n}.out" for n in range(2)]
    workers = [start_worker(path, out, "--concurrency", "4") for out in outs]
    ids = [f"s{n:02d}" for n in range(16)]
    try:
        await eventually(lambda: all(b"ready" in out.read_bytes() for out in outs))
        async with open_store(path) as store, AgentSystem(store=store) as service:
            for sid in ids:
                await service.submit(COUNTER, Counting(target=2, wait_for=1), session_id=sid)
            for sid in ids:
                await service.send(COUNTER, sid, Poke(text="go"), drive=False)
            await until_ended(store, ids)
            for sid in ids:
                stored = service.stored(COUNTER, sid)
                check_history(await stored.history(), await stored.state())
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        await eventually(lambda: all(worker.poll() is not None for worker in workers))
        assert [worker.returncode for worker in workers] == [0, 0], [
            out.read_text() for out in outs
        ]
        assert all("drained" in out.read_text() for out in outs)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


async def test_a_killed_worker_s_sessions_are_taken_over_once_its_leases_run_out(
    where: str, tmp_path: Path
) -> None:
    path = where
    ids = ["k1", "k2"]
    doomed = start_worker(path, tmp_path / "doomed.out", "--lease-ttl", "1", WORK_HOLD_FOREVER="1")
    heir = None
    try:
        async with open_store(path) as store, AgentSystem(store=store) as service:
            for sid in ids:
                await service.submit(COUNTER, Counting(target=3), session_id=sid)
            # Both are in their "count" step (n=1 committed), which never ends in `doomed`.
            await eventually(
                lambda: (tmp_path / "doomed.out").read_text().count("holding") == len(ids)
            )
            doomed.send_signal(signal.SIGKILL)
            doomed.wait()
            assert {lease.session_id for lease in await store.leases()} <= set(ids)
            heir = start_worker(path, tmp_path / "heir.out", "--lease-ttl", "1")
            await until_ended(store, ids)
            for sid in ids:
                stored = service.stored(COUNTER, sid)
                history = await stored.history()
                check_history(history, await stored.state())
                resumes = [e.info for e in history if e.kind.value == "resume" and e.info]
                assert [r["rerun"] for r in resumes] == ["begin", "count"]
    finally:
        for process in (doomed, heir):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_worker_usage_errors(tmp_path: Path) -> None:
    from arkhon_rheo.cli import main

    assert main(["worker", "--store", str(tmp_path / "x.db")]) == 2  # no --machine
    assert main(["worker", "--store", str(tmp_path), "--machine", MACHINE]) == 2  # a directory
    code = main(["worker", "--store", str(tmp_path / "x.db"), "--machine", "nope:THING"])
    assert code == 3
    assert main(["worker", "--machine", MACHINE, "--lease-ttl", "0"]) == 2


def test_the_demo_runs_its_agents_in_worker_processes(where: str) -> None:
    python_path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "arkhon_rheo", "demo", "--workers", "2", "--sessions", "12"),
            *("--store", where, "--json"),
        ],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": python_path},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    summary = json.loads(done.stdout)
    assert summary["outcomes"] == {"finished": 12}
    assert summary["worker_exit_codes"] == [0, 0]
