"""A worker cancelled hands its sessions over: none is ended, another worker finishes each.

Cancelling a worker (``with anyio.move_on_after(...): await worker.run()``), or its
task group going down because one run's stage raised a ``BaseException``, is a
drain: each session it drove stays ``"running"`` at its last commit with its lease
given up, listed by `orphans`, and a later worker finishes it, each step committed
once. (It used to store every one of them ``"cancelled"``, which no worker claims.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentSystem, Machine, Patch, StateView, stage
from arkhon_rheo.system import Worker
from tests.support.work_machine import COUNTER, Counting, Phase
from tests.system.test_workers import check_all, make, until

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the workers' store lives: an SQLite file, or a PostgreSQL URL."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "shared.db")


async def until_counted(store: Store, ids: list[str], seq: int) -> None:
    """Wait until every session of ``ids`` has committed event ``seq``."""
    with anyio.fail_after(60):
        while True:
            records = {r.session_id: r.last_seq for r in await store.sessions()}
            if all(records.get(sid, 0) >= seq for sid in ids):
                return
            await anyio.sleep(0.01)


async def check_handed_over(service: AgentSystem, store: Store, ids: list[str]) -> None:
    """Every session of ``ids`` is "running", leased to nobody, and an orphan."""
    records = {r.session_id: r for r in await store.sessions()}
    assert {records[sid].status for sid in ids} == {"running"}
    assert [lease for lease in await store.leases() if lease.session_id in ids] == []
    orphans = {r.session_id for r in await service.orphans(COUNTER)}
    assert orphans >= set(ids)


async def finish_with_a_second_worker(service: AgentSystem, shared: str, ids: list[str]) -> None:
    async with make(shared) as second_store:
        second = Worker(second_store, [COUNTER], concurrency=8, poll_interval=0.05)
        async with anyio.create_task_group() as group:
            group.start_soon(second.run)
            await until(second_store, ids)
            second.drain()
    await check_all(service, ids)  # each n written once: each step committed once


async def test_a_cancelled_worker_hands_its_sessions_over(shared: str) -> None:
    ids = [f"c{n}" for n in range(6)]
    async with make(shared) as store, AgentSystem(store=store) as service:
        worker = Worker(store, [COUNTER], concurrency=8, poll_interval=0.05)
        for sid in ids:
            await service.submit(COUNTER, Counting(target=40, step_for=0.01), session_id=sid)
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await until_counted(store, ids, 4)  # every one is driven, steps under way
                scope.cancel()
        assert scope.cancelled_caught
        await check_handed_over(service, store, ids)
        await finish_with_a_second_worker(service, shared, ids)


class Boom(BaseException):
    """Not an `Exception`: the supervisor does not classify it, it takes the worker down."""


def bomb_machine() -> Machine[Counting]:
    @stage(reads={"n"}, writes={"n"}, next=Phase.DONE)
    async def explode(view: StateView[Counting]) -> Patch:
        raise Boom("a stage's BaseException")

    return Machine(
        name="work-bomb",
        state_type=Counting,
        initial=Phase.START,
        transitions={Phase.START: {Phase.DONE}},
        stages={Phase.START: explode},
        terminal={Phase.DONE, Phase.FAILED},
        failed=Phase.FAILED,
    )


async def test_a_runs_base_exception_hands_the_other_runs_over(shared: str) -> None:
    ids = [f"i{n}" for n in range(4)]
    bomb = bomb_machine()
    async with make(shared) as store, AgentSystem(store=store) as service:
        worker = Worker(store, [COUNTER, bomb], concurrency=8, poll_interval=0.05)
        for sid in ids:
            await service.submit(COUNTER, Counting(target=40, step_for=0.01), session_id=sid)
        caught: list[BaseException] = []
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await until_counted(store, ids, 4)
                await service.submit(bomb, Counting(), session_id="bomb")
                await anyio.sleep_forever()
        except BaseException as exc:  # the BaseException the test is about
            caught.append(exc)
        assert caught
        assert _holds(caught[0], Boom)
        await check_handed_over(service, store, ids)
        await finish_with_a_second_worker(service, shared, ids)


def _holds(error: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(error, kind):
        return True
    if isinstance(error, BaseExceptionGroup):
        return any(_holds(inner, kind) for inner in error.exceptions)
    return False
