"""An actor holds a task only while it has mail: what its activations must keep.

An idle actor is its cell alone; the mail that finds it idle starts an
activation (a task of the system's task group) that ends once the mailbox is
drained. These tests pin what that design must keep: no task per idle actor,
order and back-pressure across activations, context variables from one
activation to the next, and every way an idle actor can end (a stop, a cancel,
a forced shutdown, a watched actor's end).
"""

from __future__ import annotations

import contextvars

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from arkhon_rheo.actors import (
    Actor,
    ActorState,
    ActorSystem,
    Termination,
    TerminationKind,
)
from arkhon_rheo.actors._cell import Cell
from tests.support.helpers import Gate, Recorder, Watcher

pytestmark = pytest.mark.anyio

_where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


def _tasks() -> int:
    return len(anyio.get_running_tasks())


def _cell(ref: object) -> Cell[object, object]:
    cell = ref._cell  # type: ignore[attr-defined]
    assert isinstance(cell, Cell)
    return cell


async def test_an_idle_actor_holds_no_task() -> None:
    async with ActorSystem() as system:
        before = _tasks()
        refs = [await system.spawn(Recorder) for _ in range(50)]
        await wait_all_tasks_blocked()
        assert _tasks() == before  # 50 actors alive, no task among them
        assert all(not _cell(ref).active and _cell(ref).task is None for ref in refs)
        assert await refs[7].ask("hello") == "hello"
        await wait_all_tasks_blocked()
        assert _tasks() == before  # the activation ended with the mailbox drained
        assert system.statistics().alive == 50


async def test_order_and_counts_hold_across_activations() -> None:
    async with ActorSystem() as system:
        actor = Recorder()
        ref = await system.spawn(lambda: actor)
        for batch in range(5):
            for i in range(10):
                ref.tell_nowait((batch, i))
            await wait_all_tasks_blocked()  # drained: idle again before the next batch
            assert not _cell(ref).active
        stats = ref.statistics()
    assert actor.seen == [(batch, i) for batch in range(5) for i in range(10)]
    assert (stats.received, stats.delivered, stats.queued) == (50, 50, 0)


async def test_a_full_mailbox_makes_senders_wait_then_all_arrive_in_order() -> None:
    entered, release = anyio.Event(), anyio.Event()
    gate = Gate(entered, release)
    async with ActorSystem() as system, anyio.create_task_group() as group:
        ref = await system.spawn(lambda: gate, mailbox_capacity=1)
        ref.tell_nowait("block")
        await entered.wait()
        ref.tell_nowait("a")
        group.start_soon(ref.tell, "b")  # waits for room
        await wait_all_tasks_blocked()
        assert ref.statistics().tasks_waiting_send == 1
        release.set()
        await wait_all_tasks_blocked()
        assert gate.handled == ["block", "a", "b"]
        assert not _cell(ref).active


class Binder(Actor[str, str]):
    """Binds a context variable in ``on_start``; answers with what it sees."""

    async def on_start(self) -> None:
        _where.set(f"inside {self.context.name}")

    async def receive(self, message: str) -> str:
        if message == "rebind":
            _where.set("rebound")
        return _where.get()


async def test_context_variables_bound_by_the_actor_outlive_its_activations() -> None:
    _where.set("spawner")
    async with ActorSystem() as system:
        ref = await system.spawn(Binder, name="b")
        assert _where.get() == "spawner"  # the actor's binding stays the actor's
        assert await ref.ask("read") == "inside b"
        await wait_all_tasks_blocked()
        assert not _cell(ref).active  # each ask below is a new activation
        _where.set("sender")  # a sender's context does not leak into the actor's
        assert await ref.ask("read") == "inside b"
        assert await ref.ask("rebind") == "rebound"
        await wait_all_tasks_blocked()
        assert await ref.ask("read") == "rebound"
    assert _where.get() == "sender"


class Stopping(Recorder):
    def __init__(self, stopped: list[TerminationKind]) -> None:
        super().__init__()
        self.stopped = stopped

    async def on_stop(self, termination: Termination) -> None:
        self.stopped.append(termination.kind)


async def test_cancelling_an_idle_actor_ends_it_cancelled_and_runs_on_stop() -> None:
    stopped: list[TerminationKind] = []
    async with ActorSystem() as system:
        ref = await system.spawn(Stopping, stopped)
        await wait_all_tasks_blocked()
        assert not _cell(ref).active
        ref.cancel()
        termination = await ref.wait_terminated()
        ref.cancel()  # an ended actor: nothing to cancel
    assert termination.kind is TerminationKind.CANCELLED
    assert stopped == [TerminationKind.CANCELLED]
    assert ref.state is ActorState.STOPPED


async def test_stopping_an_idle_actor_ends_it_normally() -> None:
    stopped: list[TerminationKind] = []
    async with ActorSystem() as system:
        ref = await system.spawn(Stopping, stopped)
        await wait_all_tasks_blocked()
        ref.stop()
        assert (await ref.wait_terminated()).kind is TerminationKind.NORMAL
    assert stopped == [TerminationKind.NORMAL]


async def test_an_error_in_the_block_cancels_idle_actors_too() -> None:
    stopped: list[TerminationKind] = []
    before = {task.id for task in anyio.get_running_tasks()}
    refs = []

    async def host() -> None:
        async with ActorSystem() as system:
            refs.extend([await system.spawn(Stopping, stopped) for _ in range(3)])
            await wait_all_tasks_blocked()
            raise KeyError("the block failed")

    with pytest.raises(KeyError):
        await host()
    assert stopped == [TerminationKind.CANCELLED] * 3
    assert all(ref.state is ActorState.STOPPED for ref in refs)
    assert {task.id for task in anyio.get_running_tasks()} == before


async def test_an_idle_watcher_is_woken_by_the_notice() -> None:
    notices: list[Termination] = []
    arrived = anyio.Event()
    async with ActorSystem() as system:
        target = await system.spawn(Recorder)
        watcher = await system.spawn(Watcher, notices, arrived)
        await watcher.ask(target)
        await wait_all_tasks_blocked()
        assert not _cell(watcher).active
        assert not _cell(target).active
        target.stop()
        await arrived.wait()
    assert [notice.kind for notice in notices] == [TerminationKind.NORMAL]


async def test_an_escalation_from_one_actor_cancels_the_idle_ones() -> None:
    stopped: list[TerminationKind] = []

    class Abort(BaseException):
        pass

    class Escalating(Actor[str, None]):
        async def receive(self, message: str) -> None:
            self.context.escalate(Abort("up"))

    with anyio.fail_after(20), pytest.RaisesGroup(Abort):
        async with ActorSystem() as system:
            idle = await system.spawn(Stopping, stopped)
            ref = await system.spawn(Escalating)
            await ref.tell("go")
            await anyio.sleep_forever()
    assert stopped == [TerminationKind.CANCELLED]
    assert idle.state is ActorState.STOPPED


async def test_an_actor_done_starting_while_its_system_closes_ends_instead_of_idling() -> None:
    stopped: list[TerminationKind] = []
    entered, release = anyio.Event(), anyio.Event()
    refs = []

    class SlowStart(Stopping):
        async def on_start(self) -> None:
            with anyio.CancelScope(shield=True):  # it finishes starting after all
                entered.set()
                await release.wait()

    async def spawn(system: ActorSystem) -> None:
        refs.append(await system.spawn(SlowStart, stopped))

    async def release_once_all_wait() -> None:
        await entered.wait()
        await wait_all_tasks_blocked()  # the system's block has failed and waits for it
        release.set()

    async def host(outer: anyio.abc.TaskGroup) -> None:
        async with ActorSystem() as system:
            outer.start_soon(spawn, system)
            outer.start_soon(release_once_all_wait)
            await entered.wait()
            raise KeyError("the block failed")

    async with anyio.create_task_group() as outer:
        with pytest.raises(KeyError):
            await host(outer)
    assert stopped == [TerminationKind.CANCELLED]
    assert refs[0].state is ActorState.STOPPED


async def test_a_ping_pong_of_asks_keeps_one_activation() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Recorder)
        await wait_all_tasks_blocked()
        assert await ref.ask("first") == "first"
        activation = _cell(ref).task
        assert activation is not None  # it lingers, for the asker may ask again
        for i in range(20):
            assert await ref.ask(i) == i
            assert _cell(ref).task is activation  # no new task for the next ask
        await wait_all_tasks_blocked()
        assert not _cell(ref).active


async def test_an_actor_asked_in_turn_with_another_stops_waiting_for_more() -> None:
    async with ActorSystem() as system:
        first = await system.spawn(Recorder)
        second = await system.spawn(Recorder)
        for i in range(4):  # as a supervisor asks its stages in turn
            assert await first.ask(i) == i
            assert await second.ask(i) == i
        assert _cell(first).linger_misses >= 2  # its waits after a reply brought nothing
        assert await first.ask("again") == "again"
        assert not _cell(first).active  # it ended with its reply, without waiting
        await wait_all_tasks_blocked()
        for i in range(3):  # the ask ping-pong itself still works, a task per ask
            assert await first.ask(i) == i
