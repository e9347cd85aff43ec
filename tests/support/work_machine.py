"""A counting machine for the worker tests: steps, then a wait for messages and a timer.

A session counts ``n`` from 0 to ``target`` (one step each: a step committed
twice would show as an ``n`` written twice), scheduling a ``Tick`` timer
``timer_after`` seconds on (if set) in its first step (each later one taking
``step_for`` seconds), then waits in ``WAIT``
until it has received ``wait_for`` messages (``Poke`` sent to it, or its
``Tick``), and ends in ``DONE``. `check_history` checks a stored history
against all that. Importable by worker processes as
``tests.support.work_machine:COUNTER``.

`HOLD` lets an in-process test stop the first ``count`` step that finds it
armed until the test releases it (a step under way while a worker drains); in
a process whose environment sets ``WORK_HOLD_FOREVER``, every ``count`` step
says ``holding at n=N`` on stdout and never ends (a worker to be killed).
"""

from __future__ import annotations

import enum
import os
import sys
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
from pydantic import BaseModel

from arkhon_rheo import AgentState, Machine, Patch, StateView, stage
from arkhon_rheo.protocols import EventKind, Receive, schedule

if TYPE_CHECKING:
    from arkhon_rheo import TransitionEvent

#: ``armed``: the next ``count`` step waits on ``release`` (set ``inside`` when it does).
HOLD: dict[str, Any] = {"armed": False, "inside": None, "release": None}


class Phase(enum.Enum):
    START = "start"
    COUNT = "count"
    WAIT = "wait"
    DONE = "done"
    FAILED = "failed"


class Counting(AgentState):
    lifecycle: Phase = Phase.START
    n: int = 0
    target: int = 3
    wait_for: int = 0
    timer_after: float = 0.0
    #: How long each ``count`` step takes, in seconds (a run its worker holds a while).
    step_for: float = 0.0
    got: tuple[str, ...] = ()


class Poke(BaseModel):
    text: str


class Tick(BaseModel):
    kind: ClassVar[str] = "tick"


def _after_count(state: Counting) -> Phase:
    if state.n < state.target:
        return Phase.COUNT
    return Phase.WAIT if state.wait_for else Phase.DONE


@stage(reads={"n", "timer_after"}, writes={"n"}, next=_after_count)
async def begin(view: StateView[Counting]) -> Patch:
    if view.timer_after > 0:
        schedule(Tick(), after=view.timer_after)
    return Patch(n=view.n + 1)


@stage(reads={"n", "step_for"}, writes={"n"}, next=_after_count)
async def count(view: StateView[Counting]) -> Patch:
    if os.environ.get("WORK_HOLD_FOREVER"):  # a worker process to be killed mid-step
        sys.stdout.write(f"holding at n={view.n}\n")
        sys.stdout.flush()
        await anyio.sleep_forever()
    if HOLD["armed"]:
        HOLD["armed"] = False
        HOLD["inside"].set()
        await HOLD["release"].wait()
    if view.step_for > 0:
        await anyio.sleep(view.step_for)
    return Patch(n=view.n + 1)


class Await(Receive[Counting], reads={"got"}, writes={"got"}, accepts=(Poke, Tick)):
    async def apply(self, view: StateView[Counting], message: Any) -> Patch:
        name = message.text if isinstance(message, Poke) else "tick"
        return Patch(got=(*view.got, name))

    def next(self, state: Counting) -> Phase:
        return Phase.DONE if len(state.got) >= state.wait_for else Phase.WAIT


def counter() -> Machine[Counting]:
    """A new machine object of the counting machine (`COUNTER` is one)."""
    return Machine(
        name="work-counter",
        state_type=Counting,
        initial=Phase.START,
        transitions={
            Phase.START: {Phase.COUNT, Phase.WAIT, Phase.DONE},
            Phase.COUNT: {Phase.COUNT, Phase.WAIT, Phase.DONE},
            Phase.WAIT: {Phase.WAIT, Phase.DONE},
        },
        stages={Phase.START: begin, Phase.COUNT: count, Phase.WAIT: Await},
        terminal={Phase.DONE, Phase.FAILED},
        failed=Phase.FAILED,
    )


COUNTER = counter()


def arm() -> tuple[anyio.Event, anyio.Event]:
    """Arm `HOLD`; returns ``(inside, release)``."""
    inside, release = anyio.Event(), anyio.Event()
    HOLD.update(armed=True, inside=inside, release=release)
    return inside, release


def check_history(events: list[TransitionEvent], state: Counting) -> None:
    """Assert ``events`` are one run's worth: each ``n`` written once, in order, each wait once.

    Raises:
        AssertionError: Saying what is wrong.
    """
    assert [event.seq for event in events] == list(range(1, len(events) + 1)), "seq gap"
    steps = [event for event in events if event.kind is EventKind.STEP]
    written = [event.patch.values["n"] for event in steps if "n" in event.patch.values]
    assert written == list(range(1, state.target + 1)), f"n written {written}"
    received = [event for event in steps if event.stage == "await"]
    assert len(received) == state.wait_for, f"{len(received)} receives"
    assert len(state.got) == state.wait_for
    assert state.lifecycle is Phase.DONE


def stall_after_load(store: Any, stalled: anyio.Event, release: anyio.Event) -> None:
    """Hold ``store``'s first ``load``, the record read, until ``release``: a process paused there.

    ``stalled`` is set once it holds. Later loads go straight through.
    """
    load = store.load

    async def stalling(session_id: str) -> Any:
        loaded = await load(session_id)
        if not stalled.is_set():
            stalled.set()
            await release.wait()
        return loaded

    store.load = stalling
