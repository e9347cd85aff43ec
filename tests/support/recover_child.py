"""The child process of the recovery tests (`tests/system/test_recover.py`); not a test module.

Run as ``python tests/support/recover_child.py DB ID...``, it starts one session of
`job_machine` per id in the SQLite store at ``DB`` (leased for the default
30 s), prints ``ready`` once each has committed its first step and is inside
its second stage, and then waits until it is killed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo import AgentSystem, Machine
from arkhon_rheo.testing import ReferenceState, reference_machine

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


def job_machine(block: Callable[[], Awaitable[None]] | None = None) -> Machine[ReferenceState]:
    """The reference machine (each session here runs one cycle); ``act`` awaits ``block`` first."""

    async def held(cycle: int) -> None:
        assert block is not None
        await block()

    return reference_machine(name="job", before=None if block is None else {"act": held})


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
            await system.start(machine, ReferenceState(cycles=1), session_id=session_id)
        await all_inside.wait()
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(drive, sys.argv[1], sys.argv[2:])
