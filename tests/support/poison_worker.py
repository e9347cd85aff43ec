"""A machine whose step kills its own process, and a worker process of it; not a test module.

A ``Job`` session with ``poison`` set runs a ``work`` step that SIGKILLs the
process running it (a step that kills its worker: ``os._exit``, the memory
killer); one without it finishes in that step. Run as ``python -m
tests.support.poison_worker STORE TTL LIMIT``: a `Worker` of `POISON` on
store ``STORE`` (see `chaos_workers.open_store`), with leases of ``TTL``
seconds and ``max_claims_without_progress=LIMIT``; prints ``ready`` once
started, and drains on SIGTERM.
"""

from __future__ import annotations

import enum
import os
import signal
import sys

import anyio

from arkhon_rheo import AgentState, Machine, Patch, StateView, stage
from arkhon_rheo.system import Worker
from tests.support.chaos_workers import open_store


class Phase(enum.Enum):
    WORK = "work"
    DONE = "done"
    FAILED = "failed"


class Job(AgentState):
    lifecycle: Phase = Phase.WORK
    poison: bool = False
    done: bool = False


def _done(state: Job) -> Phase:
    return Phase.DONE


@stage(reads={"poison"}, writes={"done"}, next=_done)
async def work(view: StateView[Job]) -> Patch:
    if view.poison:
        os.kill(os.getpid(), signal.SIGKILL)
    return Patch(done=True)


POISON = Machine(
    name="poison-job",
    state_type=Job,
    initial=Phase.WORK,
    transitions={Phase.WORK: {Phase.DONE}},
    stages={Phase.WORK: work},
    terminal={Phase.DONE, Phase.FAILED},
    failed=Phase.FAILED,
)


async def serve(store_spec: str, ttl: float, limit: int) -> None:
    async with open_store(store_spec, paused=False) as store:
        worker = Worker(
            store, [POISON], lease_ttl=ttl, poll_interval=0.05, max_claims_without_progress=limit
        )
        async with anyio.create_task_group() as group:
            with anyio.open_signal_receiver(signal.SIGTERM) as received:

                async def drain() -> None:
                    async for _ in received:
                        worker.drain()

                group.start_soon(drain)
                print("ready", flush=True)
                await worker.run()
                group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(serve, sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))
