"""The child of the inbox crash tests (`tests/system/test_inbox_crash.py`); not a test module.

Run as ``python tests/support/inbox_child.py DB MODE``:

- ``MODE=apply``: sends parked session ``t1`` a `Hold` message (id ``hold-1``) and
  prints ``ready`` once the stage applying it is running (stored, not yet
  committed), then waits to be killed.
- ``MODE=post``: stores a `Hold` message (id ``hold-1``) in ``t1``'s inbox
  without waking it (as a sender killed between the two would leave it),
  prints ``ready`` and waits to be killed.
- ``MODE=timer``: opens ticket ``t2``, whose first step sets a timer an hour
  ahead, prints ``ready`` once it has parked, and waits to be killed.
"""

from __future__ import annotations

import sys
import time

import anyio

from arkhon_rheo import AgentSystem
from arkhon_rheo.protocols import NewMessage
from tests.support.tickets import HOLD, TICKETS, Hold, Ticket


async def drive(db: str, mode: str) -> None:
    async with AgentSystem(path=db) as system:
        if mode == "apply":
            inside = anyio.Event()
            HOLD["forever"], HOLD["inside"] = True, inside
            await system.send(TICKETS, "t1", Hold(text="once"), message_id="hold-1")
            await inside.wait()
        elif mode == "post":
            assert system.store is not None
            message = NewMessage("hold-1", "Hold", {"text": "once"}, time.time())
            await system.store.post("t1", message, capacity=10)
        else:
            result = await system.run(TICKETS, Ticket(), session_id="t2")
            assert result.exit_reason.value == "waiting", result
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(drive, sys.argv[1], sys.argv[2])
