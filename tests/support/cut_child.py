"""A parent and its gated child for `tests/graphs/test_subgraph_cut.py`, and its child process.

Run as ``python tests/support/cut_child.py STORE``, it approves the parked child
of parent ``m1`` (`CHILD`) in the store at ``STORE`` (a SQLite path or a
PostgreSQL URL), in a system that does not serve the parent's machine, prints
``ready`` once the child's stage after its gate is under way, and waits there
until it is killed: the child's run is cut before it ends, its lease held by a
dead process.
"""

from __future__ import annotations

import enum
import sys
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo import AgentState, AgentSystem, Gate, Machine, Patch, StateView, stage, subgraph
from arkhon_rheo.store import PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from arkhon_rheo.protocols import Store

#: The child of parent ``m1``: the parent's stage, and the number of its first event.
CHILD = "m1/authenticate/1"


class P(enum.Enum):
    AUTH = "auth"
    DONE = "done"
    FAILED = "failed"


class C(enum.Enum):
    CHECK = "check"
    ISSUE = "issue"
    DONE = "done"
    FAILED = "failed"


class Main(AgentState):
    lifecycle: P = P.AUTH
    user: str = ""
    token: str = ""


class Auth(AgentState):
    lifecycle: C = C.CHECK
    user: str = ""
    approved: bool = False
    token: str = ""


class Counts:
    """The child's stage runs here; while ``hang``, its gated stage hangs once entered."""

    def __init__(self) -> None:
        self.entered = 0
        self.issued = 0
        self.hang = False
        self.inside = anyio.Event()

    async def enter(self) -> None:
        self.entered += 1
        if self.hang:
            self.inside.set()
            await anyio.sleep_forever()


def pair(counts: Counts) -> tuple[Machine[Main], Machine[Auth]]:
    """A parent whose only stage runs a child that pauses at a gate before ``issue``."""

    @stage(reads={"user"}, writes=(), next=C.ISSUE)
    async def check(view: StateView[Auth]) -> Patch:
        return Patch()

    @stage(reads={"user", "approved"}, writes={"token"}, next=C.DONE)
    async def issue(view: StateView[Auth]) -> Patch:
        await counts.enter()
        counts.issued += 1
        return Patch(token=f"token-for-{view.user}-{view.approved}")

    child = Machine(
        name="auth",
        state_type=Auth,
        initial=C.CHECK,
        transitions={C.CHECK: {C.ISSUE}, C.ISSUE: {C.DONE}},
        stages={C.CHECK: check, C.ISSUE: issue},
        terminal={C.DONE, C.FAILED},
        failed=C.FAILED,
        gates=[Gate.before("issue", field="approved", answer=bool)],
    )
    authenticate = subgraph(
        child,
        name="authenticate",
        reads={"user"},
        writes={"token"},
        input=lambda view: Auth(user=view.user),
        output=lambda child, view: Patch(token=child.token),
        next=P.DONE,
    )
    parent = Machine(
        name="main",
        state_type=Main,
        initial=P.AUTH,
        transitions={P.AUTH: {P.DONE}},
        stages={P.AUTH: authenticate},
        terminal={P.DONE, P.FAILED},
        failed=P.FAILED,
    )
    return parent, child


def open_store(where: str) -> Store:
    """The store at ``where``: a PostgreSQL URL, else a SQLite path."""
    if where.startswith("postgresql://"):
        return PostgresStore(where)
    return SQLiteStore(where)


async def approve_and_hang(where: str) -> None:
    counts = Counts()
    counts.hang = True
    _, child = pair(counts)
    async with open_store(where) as store, AgentSystem(store=store) as system:
        await system.stored(child, CHILD).approve(True)
        await counts.inside.wait()
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(approve_and_hang, sys.argv[1])
