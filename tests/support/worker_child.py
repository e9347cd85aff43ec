"""A worker process of the chaos harness (`tests/support/chaos_workers.py`); not a test module.

Run as ``python tests/support/worker_child.py STORE ACKS TTL CONCURRENCY``: a
`Worker` of the counting machine on store ``STORE`` (see
`chaos_workers.open_store`), with leases of ``TTL`` seconds. Every step the
worker's runs commit (acknowledged by the store, then its listener called) is
appended as one line, ``TOKEN SESSION SEQ KIND STAGE N`` (``TOKEN``: the
lease's fencing token the append carried), to ``ACKS/<pid>.log`` with a single
``write`` on an ``O_APPEND`` file, so it is on file the moment it is
acknowledged, whatever kills the process after. Its warnings and errors (a
lease lost: ``session_lease_lost``) go to stderr. Prints ``ready`` once
SIGTERM drains it.

Its poison guard (`Worker`'s ``max_claims_without_progress``) is `CLAIMS`, not
the default 5: the harness's chaos takes the same sessions from their holder
again and again. Near a run's end the last sessions still running are all
one worker's, and a pause picks a worker that holds leases (within 20 ms of
its claim), past the lease: the next worker to claim them is paused or killed
in turn before its first step (0.25 s) commits. Five such claims in a row, and
the default guard failed them (``PoisonSession``, about one slow run in
three). That is the guard's right call for a crash loop, and not what the
chaos tests (tests/system/test_poison_sessions.py tests the guard).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo.protocols import EventKind
from arkhon_rheo.system import Worker
from tests.support.chaos_workers import ack_line, open_store
from tests.support.work_machine import COUNTER

if TYPE_CHECKING:
    from arkhon_rheo import TransitionEvent

#: Claims without a commit before a session is failed as poison: more than the
#: harness's actions (40 in the slow test), each of which takes a session from its
#: holder at most once; a real crash loop still ends, in ``CLAIMS`` lease spans.
CLAIMS = 50


async def work(store_spec: str, acks: str, ttl: float, concurrency: int) -> None:
    fd = os.open(Path(acks) / f"{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def acknowledged(event: TransitionEvent) -> None:
        # A step reaches the listeners once its append is acknowledged (a supervisor's
        # failure record is published even when its store refused it: not counted).
        if event.kind is not EventKind.FAILURE:
            # The fencing token the append carried (a PostgresStore's; "-" for others).
            held = getattr(store, "_tokens", {}).get(event.session_id)
            token = "-" if held is None else str(held[1])
            os.write(fd, f"{token} {ack_line(event)}".encode())

    # Warnings and errors on stderr (the harness's log of this worker): a lease lost shows.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")
    store = open_store(store_spec)
    async with store:
        worker = Worker(
            store,
            [COUNTER],
            concurrency=concurrency,
            lease_ttl=ttl,
            poll_interval=0.05,
            listeners=[acknowledged],
            max_claims_without_progress=CLAIMS,
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
    anyio.run(work, sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
