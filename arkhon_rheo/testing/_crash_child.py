"""The child process of `crash_loop`: drives a user's sessions until it is killed.

Run by the parent as ``python -m arkhon_rheo.testing._crash_child`` with its
settings as one JSON argument. It imports the user's machine and initial-state
factory from their ``module:attr`` names, opens the SQLite store, says
``ready`` on its report pipe, then resumes every orphaned session (`recover`:
the previous child was killed, so their leases are held by a dead process) and
starts the planned sessions that are not stored yet.

Each commit is reported as ``ack <session_id> <seq>`` by a listener: listeners
run only once the store has acknowledged the commit, so a line on the pipe is
a promise the store made. A session's creation is reported as ``ack <id> 0``
once `AgentSystem.start` returned. A session that ended badly is reported as
``fail <id> <reason>``, and ``done`` ends the report. Lines are short and
written whole to the pipe (below ``PIPE_BUF``), so a kill leaves whole lines
or nothing; the parent reads them even after the child is gone.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ConfigurationError
from .._load import as_configuration, load_factory, load_target
from ..protocols import AgentState, Durability, Machine
from ..store import SQLiteStore
from ..system import AgentSystem

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import TransitionEvent
    from ..system import SessionHandle

__all__ = ["load_machine", "load_state_factory", "planned"]


def load_machine(spec: str) -> Machine[Any]:
    """The `Machine` that ``spec`` (``module:attr``) names: the machine, or what its factory makes.

    Raises:
        ConfigurationError: If it names neither, or does not resolve.
    """
    machine: Machine[Any] = load_target(spec, Machine, errors=as_configuration)
    return machine


def load_state_factory(spec: str) -> Callable[[], AgentState]:
    """A function making a fresh initial state, from ``spec``: a callable taking no argument.

    Raises:
        ConfigurationError: If ``spec`` names no callable (or does not resolve); the
            function it returns raises it if the callable returns no `AgentState`.
    """
    factory = load_factory(spec, errors=as_configuration)

    def make() -> AgentState:
        state = factory()
        if not isinstance(state, AgentState):
            raise ConfigurationError(
                f"the initial state factory {spec!r} must return an AgentState, got {state!r}"
            )
        return state

    return make


def planned(run: int, sessions: int, new_per_run: int) -> list[str]:
    """The session ids run ``run`` starts unless they are stored already."""
    return [f"s{i:04d}" for i in range(sessions)] + [f"r{run:04d}-{i}" for i in range(new_per_run)]


class _Report:
    """Writes the child's report lines to the pipe, each in one ``os.write``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def line(self, text: str) -> None:
        os.write(self.fd, f"{text}\n".encode())

    def __call__(self, event: TransitionEvent) -> None:
        self.line(f"ack {event.session_id} {event.seq}")


async def _drive(settings: dict[str, Any]) -> None:
    machine = load_machine(settings["machine"])
    make_state = load_state_factory(settings["state"])
    report = _Report(settings["fd"])
    async with (
        SQLiteStore(settings["db"], durability=Durability(settings["durability"])) as store,
        AgentSystem(
            store=store,
            listeners=[report],
            lease_ttl=settings["lease_ttl"],
            snapshot_every=settings["snapshot_every"],
            max_steps=settings["max_steps"],
        ) as system,
    ):
        report.line("ready")

        async def finish(handle: SessionHandle[Any]) -> None:
            result = await handle.result()
            if not result.ok:
                reason = result.exit_reason.value
                report.line(f"fail {handle.session_id} {reason}")

        async def fresh(session_id: str) -> None:
            handle = await system.start(machine, make_state(), session_id=session_id)
            report.line(f"ack {session_id} 0")
            await finish(handle)

        stored = {record.session_id for record in await store.sessions()}
        async with anyio.create_task_group() as tg:
            for handle in await system.recover(machine):
                tg.start_soon(finish, handle)
            ids = planned(settings["run"], settings["sessions"], settings["new_per_run"])
            for session_id in ids:
                if session_id not in stored:
                    tg.start_soon(fresh, session_id)
    report.line("done")


def main(argv: list[str]) -> int:
    """Run the child with the settings in ``argv[0]`` (JSON)."""
    settings = json.loads(argv[0])
    # Seeded per run, so a machine drawing from ``random`` is reproducible.
    random.seed(f"{settings['seed']}/{settings['run']}")
    anyio.run(_drive, settings, backend=settings["backend"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
