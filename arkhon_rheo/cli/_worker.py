"""``arkhon-rheo worker``: drive the sessions of some machines that the store has work for.

The process claims sessions of the ``--machine`` machines (new ones stored by
``AgentSystem.submit``, parked ones whose message or timer is due, and those
whose driver died, once its lease ran out) and drives up to ``--concurrency``
of them at once (see `arkhon_rheo.system.Worker`). SIGTERM or SIGINT drains it:
it stops claiming, lets the steps under way commit, hands every session over
at that commit boundary (its record left ``"running"``, its lease given up)
and exits 0; another worker goes on from there.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import anyio

from ..core import Keyring
from ..store._seams import StoreLocation
from ..system import Worker
from ._common import print_json, store_file, store_label
from ._load import load_machine

if TYPE_CHECKING:
    import argparse

__all__ = ["worker"]


async def _work(args: argparse.Namespace, machines: list[object]) -> dict[str, object]:
    async with StoreLocation(store_file(args.store)).open() as store:
        runner = Worker(
            store,
            machines,  # type: ignore[arg-type]
            concurrency=args.concurrency,
            lease_ttl=args.lease_ttl,
            poll_interval=args.poll,
            secrets=Keyring.from_env(),
            max_claims_without_progress=args.max_claims or None,
        )
        async with anyio.create_task_group() as group:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:

                async def drain_on_signal() -> None:
                    async for _ in received:
                        runner.drain()

                group.start_soon(drain_on_signal)
                # Ready: from here a signal drains (the tests and the demo wait for this line).
                sys.stdout.write(f"worker {runner.owner} ready\n")
                sys.stdout.flush()
                await runner.run()
                group.cancel_scope.cancel()
        return {"owner": runner.owner, "driven": runner.driven, "store": store_label(args.store)}


def worker(args: argparse.Namespace) -> int:
    """``arkhon-rheo worker``: claim and drive sessions until SIGTERM/SIGINT, then drain."""
    machines: list[object] = [load_machine(target) for target in args.machine]
    store_file(args.store)
    summary = args.run(_work, args, machines)
    if args.json:
        print_json(summary)
    else:
        sys.stdout.write(f"worker {summary['owner']} drained: {summary['driven']} runs\n")
    return 0
