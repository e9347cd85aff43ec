"""The actor system runs inside the host's own event loop, beside the host's tasks."""

from __future__ import annotations

import asyncio
import threading

import anyio
import trio

from arkhon_rheo.actors import ActorSystem
from tests.support.helpers import Recorder


async def _host_main() -> list[object]:
    threads_before = threading.active_count()
    host_ticks = 0

    async def host_work() -> None:
        nonlocal host_ticks
        for _ in range(50):
            host_ticks += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host_work)
        async with ActorSystem() as system:
            ref = await system.spawn(Recorder)
            replies = [await ref.ask(i) for i in range(20)]
    assert host_ticks == 50
    assert threading.active_count() == threads_before
    return replies


def test_embedded_in_asyncio_run() -> None:
    async def main() -> list[object]:
        # A plain asyncio host, with its own asyncio tasks next to ours.
        side = asyncio.create_task(asyncio.sleep(0))
        replies = await _host_main()
        await side
        return replies

    assert asyncio.run(main()) == list(range(20))


def test_embedded_in_trio_run() -> None:
    async def main() -> list[object]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 0)
            return await _host_main()

    assert trio.run(main) == list(range(20))


def test_importing_the_package_has_no_side_effects() -> None:
    import subprocess
    import sys

    code = (
        "import threading, logging, asyncio\n"
        "n = threading.active_count()\n"
        "import arkhon_rheo, arkhon_rheo.actors\n"
        "assert threading.active_count() == n\n"
        "assert not logging.getLogger().handlers\n"
        "assert asyncio.get_event_loop_policy()._local._loop is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
