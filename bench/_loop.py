"""The workload the session benches run: `arkhon_rheo.testing.reference_machine`.

A think -> act -> observe loop over `ReferenceState` (its ``steps`` grow by one
each cycle); see `arkhon_rheo.testing.reference_machine` for its stages. A
module of the ``bench`` scripts (each run as ``python bench/NAME.py``, so this
directory is on ``sys.path``); not part of the library.
"""

from __future__ import annotations

import anyio

from arkhon_rheo import ExitReason, Machine
from arkhon_rheo.testing import ReferenceState, reference_machine

#: Cycles each session of a crowd runs.
SESSION_CYCLES = 10


class Gate:
    """Where every session waits in its first stage until the clock starts.

    ``all_in`` is set once ``expected`` sessions have arrived; ``open`` lets them
    go. Once open, passing it costs nothing (no checkpoint), so it does not
    weigh on the timed cycles.
    """

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.all_in = anyio.Event()
        self.open = anyio.Event()

    async def wait(self, cycle: int = 0) -> None:
        if self.open.is_set():
            return
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_in.set()
        await self.open.wait()


def build_machine(gate: Gate | None = None, *, name: str = "bench-loop") -> Machine[ReferenceState]:
    """The reference machine; with ``gate``, each ``think`` passes it first."""
    return reference_machine(name=name, before=None if gate is None else {"think": gate.wait})


def check_finished(state: ReferenceState, exit_reason: ExitReason, cycles: int) -> None:
    """A run that did not do the work it was timed for is a bug, not a figure."""
    if exit_reason is not ExitReason.FINISHED or len(state.steps) != cycles:
        raise RuntimeError(
            f"bench session ended {exit_reason.value} after {len(state.steps)} of {cycles} "
            f"cycles (lifecycle {state.lifecycle!r}, last error {state.last_error!r})"
        )
