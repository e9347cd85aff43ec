"""Inline activations: an idle actor asked with `ask_here` runs in its caller's task.

What the fast path must keep: the reply is the handler's; mail that comes
during an inline activation queues behind it and is handled afterwards, in
order, by a normal activation; a busy actor is asked through its mailbox; the
failure policy, a stray ``BaseException``, the caller's cancellation, a cancel
of the actor and the system's shutdown each end (or keep) the actor as they
say. `spawn_here` and `stop_here` start and end an idle actor without a task.
"""

from __future__ import annotations

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from arkhon_rheo.actors import (
    Actor,
    ActorState,
    ActorSystem,
    Directive,
    Termination,
    TerminationKind,
)
from arkhon_rheo.actors._cell import Cell
from arkhon_rheo.actors._seams import ask_here, spawn_here, stop_here
from arkhon_rheo.errors import ActorStopped
from tests.support.helpers import Boom, Recorder, Watcher

pytestmark = pytest.mark.anyio


def _cell(ref: object) -> Cell[object, object]:
    cell = ref._cell  # type: ignore[attr-defined]
    assert isinstance(cell, Cell)
    return cell


class Stray(BaseException):
    """Neither an Exception nor cancellation: the actor's bug, contained to it."""


class Scripted(Actor[object, object]):
    """Records what it handles and in which task; waits, raises or replies as told."""

    def __init__(self, log: list[object], release: anyio.Event | None = None) -> None:
        self.log = log
        self.release = release
        self.tasks: list[object] = []

    async def receive(self, message: object) -> object:
        self.tasks.append(anyio.get_current_task().id)
        self.log.append(message)
        if message == "wait":
            assert self.release is not None
            await self.release.wait()
        elif message == "boom":
            raise Boom("boom")
        elif message == "stray":
            raise Stray("stray")
        return f"re:{message}"


async def test_an_idle_actor_asked_here_runs_in_the_callers_task() -> None:
    log: list[object] = []
    async with ActorSystem() as system:
        actor = Scripted(log)
        ref = await system.spawn(lambda: actor)
        await wait_all_tasks_blocked()
        before = len(anyio.get_running_tasks())
        assert await ask_here(ref, "a") == "re:a"
        assert actor.tasks == [anyio.get_current_task().id]  # no activation task
        assert len(anyio.get_running_tasks()) == before
        cell = _cell(ref)
        assert not cell.active
        assert cell.task is None
        await ref.tell("b")  # ... as it does any idle actor
        await wait_all_tasks_blocked()
        assert log == ["a", "b"]
        assert actor.tasks[1] != actor.tasks[0]
        ref.stop()


async def test_mail_that_comes_during_an_inline_activation_is_handled_after_it_in_order() -> None:
    log: list[object] = []
    release = anyio.Event()
    async with ActorSystem() as system:
        actor = Scripted(log, release)
        ref = await system.spawn(lambda: actor)
        replies: list[object] = []

        async def ask_inline() -> None:
            replies.append(await ask_here(ref, "wait"))

        async with anyio.create_task_group() as group:
            group.start_soon(ask_inline)
            await wait_all_tasks_blocked()
            assert _cell(ref).active  # claimed by the inline activation
            await ref.tell("b")
            await ref.tell("c")
            asked = []

            async def ask_queued() -> None:
                asked.append(await ref.ask("d"))

            group.start_soon(ask_queued)
            await wait_all_tasks_blocked()
            assert log == ["wait"]  # queued behind it: nothing ran meanwhile
            assert ref.statistics().queued == 3
            release.set()
        assert replies == ["re:wait"]
        assert asked == ["re:d"]
        assert log == ["wait", "b", "c", "d"]
        ref.stop()


async def test_a_busy_actor_is_asked_through_its_mailbox() -> None:
    log: list[object] = []
    release = anyio.Event()
    async with ActorSystem() as system:
        actor = Scripted(log, release)
        ref = await system.spawn(lambda: actor)
        await ref.tell("wait")  # an activation task runs it
        await wait_all_tasks_blocked()
        got: list[object] = []
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                got.append(await ask_here(ref, "x"))

            group.start_soon(ask)
            await wait_all_tasks_blocked()
            assert log == ["wait"]  # not run inline, around the busy handler
            release.set()
        assert got == ["re:x"]
        assert actor.tasks[0] == actor.tasks[1]  # the activation handled both
        ref.stop()


async def test_an_error_goes_to_the_failure_policy_and_to_the_caller() -> None:
    async with ActorSystem() as system:
        stopping = await system.spawn(Scripted, [])
        with pytest.raises(Boom):
            await ask_here(stopping, "boom")
        termination = await stopping.wait_terminated()
        assert termination.kind is TerminationKind.CRASHED
        assert isinstance(termination.error, Boom)

        made: list[Scripted] = []

        def factory() -> Scripted:
            made.append(Scripted([]))
            return made[-1]

        restarting = await system.spawn(factory, on_failure=lambda exc: Directive.RESTART)
        with pytest.raises(Boom):
            await ask_here(restarting, "boom")
        assert restarting.restarts == 1
        assert len(made) == 2
        assert await ask_here(restarting, "after") == "re:after"  # the fresh instance
        assert made[1].log == ["after"]
        restarting.stop()


async def test_a_stray_base_exception_crashes_the_actor_and_the_caller_sees_it_stopped() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Scripted, [])
        other = await system.spawn(Recorder)
        with pytest.raises(ActorStopped) as caught:
            await ask_here(ref, "stray")
        assert isinstance(caught.value.__cause__, Stray)
        termination = await ref.wait_terminated()
        assert termination.kind is TerminationKind.CRASHED
        assert isinstance(termination.error, Stray)
        assert await other.ask("still here") == "still here"  # contained to the actor
        with pytest.raises(ActorStopped):
            await ask_here(ref, "again")
        other.stop()


async def test_the_callers_cancellation_cancels_the_handler_and_leaves_the_actor_alive() -> None:
    log: list[object] = []
    async with ActorSystem() as system:
        actor = Scripted(log, anyio.Event())
        ref = await system.spawn(lambda: actor)
        with anyio.move_on_after(0.01) as scope:
            await ask_here(ref, "wait")  # never released
        assert scope.cancelled_caught
        assert ref.state is ActorState.RUNNING
        assert not _cell(ref).active
        assert await ask_here(ref, "next") == "re:next"
        assert log == ["wait", "next"]
        ref.stop()


async def test_an_actor_cancelled_during_an_inline_activation_ends_after_it() -> None:
    release = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(Scripted, [], release)
        notices: list[Termination] = []
        watcher = await system.spawn(Watcher, notices, anyio.Event())
        await watcher.ask(ref)
        got: list[object] = []
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                got.append(await ask_here(ref, "wait"))

            group.start_soon(ask)
            await wait_all_tasks_blocked()
            ref.cancel()  # no task to cancel: the cell is told, and ends once released
            await ref.tell("dropped")
            await wait_all_tasks_blocked()
            assert ref.state is ActorState.RUNNING
            release.set()
        assert got == ["re:wait"]  # the inline handler ran to its end
        termination = await ref.wait_terminated()
        assert termination.kind is TerminationKind.CANCELLED
        assert system.statistics().dead_letters == 1
        await wait_all_tasks_blocked()
        assert [notice.kind for notice in notices] == [TerminationKind.CANCELLED]
        watcher.stop()


async def test_a_shutdown_during_an_inline_activation_ends_the_actor() -> None:
    refs = []
    with anyio.fail_after(5):
        async with ActorSystem(shutdown_timeout=0.05) as system:
            ref = await system.spawn(Scripted, [], anyio.Event())
            refs.append(ref)

            async def ask() -> None:
                await ask_here(ref, "wait")  # never released: cancelled by the shutdown

            async def asker() -> None:
                await system.spawn(lambda: _Asker(ask))

            await asker()
            await wait_all_tasks_blocked()
            assert _cell(ref).active
    (ref,) = refs
    termination = await ref.wait_terminated()
    assert termination.kind is TerminationKind.CANCELLED


class _Asker(Actor[object, object]):
    """An actor that starts an inline ask from its own task (as a supervisor does)."""

    def __init__(self, ask: object) -> None:
        self.ask = ask

    async def on_start(self) -> None:
        self.context.ref.tell_nowait("go")

    async def receive(self, message: object) -> object:
        await self.ask()  # type: ignore[operator]
        return None


async def test_spawn_here_starts_the_actor_in_this_task_and_stop_here_ends_it() -> None:
    tasks: list[object] = []

    class Starts(Scripted):
        async def on_start(self) -> None:
            tasks.append(anyio.get_current_task().id)

    async with ActorSystem() as system:
        ref = await spawn_here(system, Starts, [], name="here")
        assert tasks == [anyio.get_current_task().id]
        assert ref.state is ActorState.RUNNING
        assert ref.name == "here"
        assert system.statistics().alive == 1
        assert not _cell(ref).active
        notices: list[Termination] = []
        arrived = anyio.Event()
        watcher = await system.spawn(Watcher, notices, arrived)
        await watcher.ask(ref)
        assert await ask_here(ref, "a") == "re:a"
        assert await stop_here(ref)  # idle: ended here
        termination = ref.termination
        assert termination is not None
        assert termination.kind is TerminationKind.CANCELLED
        assert await stop_here(ref)  # ended already
        await arrived.wait()  # the watchers are told
        assert [notice.actor for notice in notices] == [ref]
        assert system.statistics().alive == 1  # the watcher only
        watcher.stop()


async def test_stop_here_on_a_busy_actor_cancels_it_and_says_so() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Scripted, [], anyio.Event())
        await ref.tell("wait")
        await wait_all_tasks_blocked()
        assert not await stop_here(ref)
        termination = await ref.wait_terminated()
        assert termination.kind is TerminationKind.CANCELLED


async def test_spawn_here_raises_what_on_start_raised() -> None:
    class Fails(Actor[object, object]):
        async def on_start(self) -> None:
            raise Boom("no start")

    async with ActorSystem() as system:
        with pytest.raises(Boom, match="no start"):
            await spawn_here(system, Fails, name="fails")
        assert system.statistics().alive == 0
