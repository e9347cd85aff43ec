"""The child process of the recovery tests (`tests/test_recover.py`); not a test module.

Run as ``python tests/recover_child.py DB ID...``, it starts one session of
`job_machine` per id in the SQLite store at ``DB`` (leased for the default
30 s), prints ``ready`` once each has committed its first step and is inside
its second stage, and then waits until it is killed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo import AgentState, AgentSystem, Lifecycle, Machine, Patch, StateView, stage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

L = Lifecycle


class Job(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    notes: tuple[str, ...] = ()


def job_machine(block: Callable[[], Awaitable[None]] | None = None) -> Machine[Job]:
    """Two steps, ``load`` then ``work``; ``work`` awaits ``block`` first, if given."""

    @stage(reads=(), writes={"notes"}, next=L.ACTING, name="load")
    async def load(view: StateView[Job]) -> Patch:
        return Patch(notes=("load",))

    @stage(reads={"notes"}, writes={"notes"}, next=L.FINISHED, name="work")
    async def work(view: StateView[Job]) -> Patch:
        if block is not None:
            await block()
        return Patch(notes=(*view.notes, "work"))

    return Machine(
        name="job",
        state_type=Job,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.FINISHED}},
        stages={L.INITIALIZED: load, L.ACTING: work},
    )


async def drive(db: str, ids: list[str]) -> None:
    inside = 0
    all_inside = anyio.Event()

    async def block() -> None:
        nonlocal inside
        inside += 1
        if inside == len(ids):
            all_inside.set()
        await anyio.sleep_forever()

    machine = job_machine(block)
    async with AgentSystem(path=db) as system:
        for session_id in ids:
            await system.start(machine, Job(), session_id=session_id)
        await all_inside.wait()
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(drive, sys.argv[1], sys.argv[2:])
