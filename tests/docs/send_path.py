"""The modules a message crosses from `AgentSystem.send` to its commit, traced.

A parked session of a small machine is sent one message; `sys.setprofile`
records the module of every Python frame of the package entered from the call
of ``send`` until the commit that applied the message is published (its event
reaches the session's listeners, after the store has written it). The
Architecture page lists what this finds (``tests/docs/test_send_path.py``
holds the two together). Run it from the repository root to print the path::

    python -m tests.docs.send_path
"""

from __future__ import annotations

import enum
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel

from arkhon_rheo import AgentState, AgentSystem, Machine, MemoryStore, Patch, SQLiteStore, StateView
from arkhon_rheo.protocols import Receive

if TYPE_CHECKING:
    from types import FrameType

    from arkhon_rheo import TransitionEvent
    from arkhon_rheo.protocols import Store

#: Modules every layer may use (logging, errors, JSON): not counted as a step of the path.
LEAVES = frozenset(
    {"_construct", "_errors", "_exports", "_json", "_load", "_log", "_lru", "_redact", "_tracing"}
)


class Note(BaseModel):
    text: str


class Phase(enum.Enum):
    OPEN = "open"
    DONE = "done"
    FAILED = "failed"


class Notes(AgentState):
    lifecycle: Phase = Phase.OPEN
    notes: tuple[str, ...] = ()


class Take(Receive[Notes], reads={"notes"}, writes={"notes"}, accepts=(Note,)):
    async def apply(self, view: StateView[Notes], message: Note) -> Patch:
        return Patch(notes=(*view.notes, message.text))

    def next(self, state: Notes) -> Phase:
        return Phase.OPEN


NOTES = Machine(
    name="send-path",
    state_type=Notes,
    initial=Phase.OPEN,
    transitions={Phase.OPEN: {Phase.OPEN, Phase.DONE}},
    stages={Phase.OPEN: Take},
    terminal={Phase.DONE, Phase.FAILED},
    failed=Phase.FAILED,
)


class _Trace:
    """Records the package's modules whose frames are entered, in order, until stopped."""

    def __init__(self) -> None:
        self.modules: list[str] = []
        self._seen: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if name.startswith("arkhon_rheo.") and name not in self._seen:
            self._seen.add(name)
            self.modules.append(name)

    def listener(self, event: TransitionEvent) -> None:
        if event.info and "message" in event.info:
            sys.setprofile(None)


async def _traced(store: Store) -> list[str]:
    trace = _Trace()
    async with AgentSystem(store=store, listeners=[trace.listener]) as system:
        await system.run(NOTES, Notes(), session_id="s")  # parks, waiting for mail
        warm = await system.send(NOTES, "s", Note(text="warm-up"))  # every import done
        assert warm.handle is not None
        await warm.handle.result()  # parked again
        sys.setprofile(trace)
        try:
            sent = await system.send(NOTES, "s", Note(text="traced"))
            assert sent.handle is not None
            await sent.handle.result()
        finally:
            sys.setprofile(None)
    return trace.modules


def send_path(store: str = "memory", *, backend: str = "asyncio") -> list[str]:
    """The package's modules (leaf modules aside) ``send`` crosses to its commit, in order."""

    async def main() -> list[str]:
        if store == "memory":
            async with MemoryStore() as memory:
                return await _traced(memory)
        with tempfile.TemporaryDirectory() as folder:
            async with SQLiteStore(Path(folder) / "s.db") as sqlite:
                return await _traced(sqlite)

    modules = anyio.run(main, backend=backend)
    return [m for m in modules if m.split(".")[1] not in LEAVES]


def packages(modules: list[str]) -> list[str]:
    """The subpackages ``modules`` lie in, in order of first appearance."""
    return list(dict.fromkeys(m.split(".")[1] for m in modules))


def _names(modules: list[str]) -> str:
    return ", ".join(f"`{m.split('.', 2)[2]}`" for m in modules) or "none"


def page_block() -> str:
    """The Architecture page's list of the path, as the trace finds it (memory and SQLite)."""
    memory, sqlite = send_path("memory"), send_path("sqlite")
    lines = [
        f"{len(memory)} modules in {len(packages(memory))} packages on a `MemoryStore`, "
        f"{len(sqlite)} in {len(packages(sqlite))} on a `SQLiteStore` "
        "(the leaf modules, logging and errors, aside):",
        "",
        "| Package | Modules, in the order a message first enters them |",
        "| --- | --- |",
    ]
    for package in packages(memory + sqlite):
        both = [m for m in memory if m.split(".")[1] == package and m in sqlite]
        only_memory = [m for m in memory if m.split(".")[1] == package and m not in sqlite]
        only_sqlite = [m for m in sqlite if m.split(".")[1] == package and m not in memory]
        cell = _names(both)
        if only_memory or only_sqlite:
            cell += f"; memory only: {_names(only_memory)}; SQLite only: {_names(only_sqlite)}"
        count = len({*both, *only_memory, *only_sqlite})
        lines.append(f"| `{package}` ({count}) | {cell} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(page_block(), end="")
