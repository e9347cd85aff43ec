from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
import structlog
from anyio import wait_all_tasks_blocked
from structlog.testing import capture_logs

from arkhon_rheo import ConfigurationError
from arkhon_rheo.actors import (
    Actor,
    ActorRef,
    ActorState,
    ActorSystem,
    Directive,
    SystemState,
    Termination,
    TerminationKind,
)
from arkhon_rheo.actors._cell import Cell
from arkhon_rheo.errors import ActorStopped, MailboxFull, SystemNotRunning
from tests.support.helpers import Boom, Crasher, Gate, Recorder, Watcher

pytestmark = pytest.mark.anyio


async def test_messages_are_handled_one_at_a_time_in_order() -> None:
    async with ActorSystem() as system:
        actor = Recorder()
        ref = await system.spawn(lambda: actor)
        for i in range(200):
            await ref.tell(i)
        assert await ref.ask("last") == "last"
    assert actor.seen == [*range(200), "last"]


async def test_spawn_returns_a_ready_ref_after_on_start() -> None:
    started: list[str] = []

    class Starter(Recorder):
        async def on_start(self) -> None:
            started.append(self.context.name)

    async with ActorSystem() as system:
        ref = await system.spawn(Starter, name="s")
        assert started == ["s"]
        assert ref.state is ActorState.RUNNING
        assert ref.name == "s"
        assert "running" in repr(ref)


async def test_backpressure_tell_waits_and_tell_nowait_raises() -> None:
    entered, release = anyio.Event(), anyio.Event()
    gate = Gate(entered, release)
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: gate, mailbox_capacity=2)
        ref.tell_nowait("block")
        await entered.wait()
        ref.tell_nowait("a")
        ref.tell_nowait("b")
        with pytest.raises(MailboxFull) as info:
            ref.tell_nowait("refused")
        assert info.value.mailbox == ref.name
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.tell, "c")
            await wait_all_tasks_blocked()
            assert ref.statistics().tasks_waiting_send == 1
            release.set()
        assert await ref.ask("d") == "D"
    assert gate.handled == ["block", "a", "b", "c", "d"]


async def test_handler_error_reaches_the_asker_with_the_actor_named() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Crasher, name="fragile")
        assert await ref.ask("hello") == "hello"
        with pytest.raises(Boom) as info:
            await ref.ask("crash")
        assert any("fragile" in note for note in info.value.__notes__)
        termination = await ref.wait_terminated()
    assert termination.kind is TerminationKind.CRASHED
    assert termination.error is info.value
    assert termination.actor is ref


async def test_a_crash_does_not_take_down_the_system_or_other_actors() -> None:
    async with ActorSystem() as system:
        fragile = await system.spawn(Crasher)
        sturdy = await system.spawn(Recorder)
        await fragile.tell("crash")
        await fragile.wait_terminated()
        assert await sturdy.ask("still here") == "still here"
        later = await system.spawn(Crasher)
        assert await later.ask("ok") == "ok"
        assert system.statistics().alive == 2


async def test_queued_messages_of_a_crashed_actor_become_dead_letters() -> None:
    entered, release = anyio.Event(), anyio.Event()

    class GateThenCrash(Gate):
        async def receive(self, message: str) -> str:
            if message == "crash":
                raise Boom("asked to crash")
            return await super().receive(message)

    errors: list[BaseException] = []

    async def pending_ask(ref: ActorRef[str, str]) -> None:
        try:
            await ref.ask("never answered")
        except ActorStopped as exc:
            errors.append(exc)

    async with ActorSystem() as system:
        ref = await system.spawn(GateThenCrash, entered, release)
        ref.tell_nowait("block")
        ref.tell_nowait("crash")
        ref.tell_nowait("lost")
        await entered.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(pending_ask, ref)
            await wait_all_tasks_blocked()
            release.set()
        assert len(errors) == 1
        assert "crashed before replying" in str(errors[0])
        assert ref.statistics().dead_letters == 2
        assert system.statistics().dead_letters == 2


async def test_dead_letters_are_counted_and_logged_and_ask_fails_at_once() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Recorder, name="gone")
        ref.stop()
        await ref.wait_terminated()
        with capture_logs() as logs:
            await ref.tell("late")
            ref.tell_nowait("later")
        assert [entry["event"] for entry in logs] == ["dead_letter", "dead_letter"]
        assert logs[0]["actor"] == "gone"
        assert system.statistics().dead_letters == 2
        with pytest.raises(ActorStopped, match="gone"):
            await ref.ask("anyone?", timeout=math.inf)


async def test_a_broken_log_pipeline_never_breaks_the_runtime() -> None:
    def explode(*_: Any) -> Any:
        raise RuntimeError("log sink down")

    structlog.configure(processors=[explode])
    try:
        async with ActorSystem() as system:
            ref = await system.spawn(Recorder)
            ref.stop()
            await ref.wait_terminated()
            await ref.tell("dead letter while logging is broken")
        assert system.statistics().dead_letters == 1
    finally:
        structlog.reset_defaults()


async def test_stop_drains_queued_messages_then_refuses_new_ones() -> None:
    entered, release = anyio.Event(), anyio.Event()
    gate = Gate(entered, release)
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: gate)
        ref.tell_nowait("block")
        ref.tell_nowait("queued")
        await entered.wait()
        ref.stop()
        assert ref.state is ActorState.STOPPING
        with pytest.raises(ActorStopped, match="stopping"):
            await ref.ask("too late")
        release.set()
        termination = await ref.wait_terminated()
    assert termination.kind is TerminationKind.NORMAL
    assert gate.handled == ["block", "queued"]


async def test_cancel_ends_the_actor_at_once() -> None:
    entered, release = anyio.Event(), anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(Gate, entered, release)
        ref.tell_nowait("block")
        ref.tell_nowait("never handled")
        await entered.wait()
        ref.cancel()
        termination = await ref.wait_terminated()
        assert termination.kind is TerminationKind.CANCELLED
        assert ref.statistics().dead_letters == 1


async def test_cancelled_ask_neither_wedges_the_actor_nor_misdelivers() -> None:
    entered, release = anyio.Event(), anyio.Event()
    gate = Gate(entered, release)
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: gate)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.ask, "block")
            await entered.wait()
            # A second ask queued behind the first, then abandoned: it is withdrawn.
            tg.start_soon(ref.ask, "withdrawn")
            await wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        release.set()
        assert await ref.ask("next") == "NEXT"
    assert gate.handled == ["block", "next"]


@pytest.mark.parametrize("how", ["stop", "crash", "cancel"])
async def test_death_watch_from_an_actor(how: str) -> None:
    notices: list[Termination] = []
    arrived = anyio.Event()
    async with ActorSystem() as system:
        watcher = await system.spawn(Watcher, notices, arrived)
        target = await system.spawn(Crasher)
        await watcher.ask(target)
        if how == "stop":
            target.stop()
        elif how == "crash":
            await target.tell("crash")
        else:
            target.cancel()
        await arrived.wait()
    expected = {
        "stop": TerminationKind.NORMAL,
        "crash": TerminationKind.CRASHED,
        "cancel": TerminationKind.CANCELLED,
    }[how]
    assert [(n.actor, n.kind) for n in notices] == [(target, expected)]
    if how == "crash":
        assert isinstance(notices[0].error, Boom)


async def test_watching_an_already_ended_actor_notifies_at_once() -> None:
    notices: list[Termination] = []
    arrived = anyio.Event()
    async with ActorSystem() as system:
        target = await system.spawn(Recorder)
        target.stop()
        await target.wait_terminated()
        watcher = await system.spawn(Watcher, notices, arrived)
        await watcher.tell(target)
        await arrived.wait()
    assert notices[0].kind is TerminationKind.NORMAL


async def test_restart_directive_replaces_the_instance_and_keeps_the_mailbox() -> None:
    instances: list[Actor[str, str]] = []
    restarted: list[Exception] = []

    class Flaky(Crasher):
        def __init__(self) -> None:
            instances.append(self)

        async def on_restart(self, error: Exception) -> None:
            restarted.append(error)
            await super().on_restart(error)

    async with ActorSystem() as system:
        ref = await system.spawn(Flaky, on_failure=lambda _: Directive.RESTART)
        ref.tell_nowait("crash")
        ref.tell_nowait("crash")
        assert await ref.ask("after") == "after"
        assert ref.restarts == 2
    assert len(instances) == 3
    assert [type(e) for e in restarted] == [Boom, Boom]


async def test_on_start_failure_is_raised_by_spawn_and_leaves_the_system_usable() -> None:
    class WontStart(Recorder):
        async def on_start(self) -> None:
            raise Boom("no")

    async with ActorSystem() as system:
        with pytest.raises(Boom) as info:
            await system.spawn(WontStart, name="ws")
        assert any("ws" in note for note in info.value.__notes__)
        assert system.statistics().alive == 0
        ref = await system.spawn(Recorder)
        assert await ref.ask(1) == 1


async def test_leaving_the_block_drains_gracefully_and_leaks_no_task() -> None:
    before = {task.id for task in anyio.get_running_tasks()}
    stopped: list[TerminationKind] = []

    class Tidy(Recorder):
        async def on_stop(self, termination: Termination) -> None:
            stopped.append(termination.kind)

    actors = [Tidy() for _ in range(5)]
    async with ActorSystem() as system:
        refs = [await system.spawn(lambda a=a: a) for a in actors]  # type: ignore[misc]
        for ref in refs:
            for i in range(10):
                ref.tell_nowait(i)
        assert system.statistics().alive == 5
    assert all(a.seen == list(range(10)) for a in actors)
    assert stopped == [TerminationKind.NORMAL] * 5
    assert {task.id for task in anyio.get_running_tasks()} == before
    assert system.state is SystemState.CLOSED


async def test_forced_shutdown_cancels_actors_past_the_deadline() -> None:
    entered, release = anyio.Event(), anyio.Event()
    stopped: list[TerminationKind] = []

    class Stuck(Gate):
        async def on_stop(self, termination: Termination) -> None:
            stopped.append(termination.kind)

    before = {task.id for task in anyio.get_running_tasks()}
    async with ActorSystem(shutdown_timeout=0) as system:
        ref = await system.spawn(Stuck, entered, release)
        ref.tell_nowait("block")
        await entered.wait()
    assert stopped == [TerminationKind.CANCELLED]
    assert ref.state is ActorState.STOPPED
    assert {task.id for task in anyio.get_running_tasks()} == before


async def test_an_error_in_the_block_cancels_actors_and_propagates() -> None:
    entered, release = anyio.Event(), anyio.Event()
    refs: list[ActorRef[str, str]] = []

    async def host() -> None:
        async with ActorSystem() as system:
            refs.append(ref := await system.spawn(Gate, entered, release))
            ref.tell_nowait("block")
            await entered.wait()
            raise Boom("host failed")

    with pytest.raises(Boom):
        await host()
    ref = refs[0]
    assert ref.termination is not None
    assert ref.termination.kind is TerminationKind.CANCELLED


async def test_wrong_state_calls_name_the_state() -> None:
    system = ActorSystem(name="sys")
    with pytest.raises(SystemNotRunning, match="new"):
        await system.spawn(Recorder)
    async with system:
        pass
    with pytest.raises(SystemNotRunning, match="closed"):
        await system.spawn(Recorder)
    with pytest.raises(SystemNotRunning, match="closed"):
        async with system:
            pass


async def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="mailbox_capacity"):
        ActorSystem(mailbox_capacity=0)
    with pytest.raises(ConfigurationError, match="ask_timeout"):
        ActorSystem(ask_timeout=-1)
    with pytest.raises(ConfigurationError, match="shutdown_timeout"):
        ActorSystem(shutdown_timeout=float("nan"))
    async with ActorSystem() as system:
        with pytest.raises(ConfigurationError, match="mailbox_capacity"):
            await system.spawn(Recorder, mailbox_capacity=-5)
        ref: ActorRef[object, object] = await system.spawn(Recorder)
        with pytest.raises(ConfigurationError, match="timeout"):
            await ref.ask("x", timeout=-1)
        assert await ref.ask("still fine") == "still fine"


async def test_cancel_racing_a_finished_handler_never_loses_a_queued_ask() -> None:
    entered, release = anyio.Event(), anyio.Event()
    outcome: list[str] = []

    async def asker(ref: ActorRef[str, str]) -> None:
        try:
            await ref.ask("queued", timeout=math.inf)
        except ActorStopped:
            outcome.append("ActorStopped")

    async with ActorSystem() as system:
        ref = await system.spawn(Gate, entered, release)
        ref.tell_nowait("block")
        await entered.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asker, ref)
            await wait_all_tasks_blocked()
            release.set()  # the handler finishes...
            ref.cancel()  # ...in the same step as the cancellation
    assert outcome == ["ActorStopped"]


async def test_a_stray_base_exception_ends_only_its_actor() -> None:
    class Abort(BaseException):
        pass

    class Aborts(Recorder):
        async def receive(self, message: object) -> object:
            raise Abort

    async with ActorSystem() as system:
        bad = await system.spawn(Aborts)
        good = await system.spawn(Recorder)
        await bad.tell("boom")
        termination = await bad.wait_terminated()
        assert await good.ask("alive") == "alive"
    assert termination.kind is TerminationKind.CRASHED
    assert isinstance(termination.error, Abort)


async def test_an_ask_whose_handler_raises_a_base_exception_fails_instead_of_hanging() -> None:
    class Abort(BaseException):
        pass

    class Aborts(Recorder):
        async def receive(self, message: object) -> object:
            raise Abort

    async with ActorSystem() as system:
        bad = await system.spawn(Aborts)
        with anyio.fail_after(20), pytest.raises(ActorStopped, match="ended before replying"):
            await bad.ask("boom", timeout=math.inf)
        assert (await bad.wait_terminated()).kind is TerminationKind.CRASHED


async def test_an_escalated_error_leaves_the_block_after_on_stop() -> None:
    class Abort(BaseException):
        pass

    stopped: list[Termination] = []

    class Escalates(Recorder):
        async def receive(self, message: object) -> object:
            self.context.escalate(Abort("up"))

        async def on_stop(self, termination: Termination) -> None:
            stopped.append(termination)

    with anyio.fail_after(20), pytest.RaisesGroup(pytest.RaisesExc(Abort, match="up")):
        async with ActorSystem() as system:
            bystander = await system.spawn(Recorder)
            bad = await system.spawn(Escalates)
            with pytest.raises(ActorStopped, match="ended before replying"):
                await bad.ask("go", timeout=math.inf)
            await anyio.sleep_forever()  # the escalation cancels the block
    assert [t.kind for t in stopped] == [TerminationKind.CRASHED]
    assert isinstance(stopped[0].error, Abort)
    assert bystander.termination is not None
    assert bystander.termination.kind is TerminationKind.CANCELLED


async def test_a_parked_tell_to_an_actor_that_dies_is_one_dead_letter() -> None:
    entered, release = anyio.Event(), anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(Gate, entered, release, mailbox_capacity=1)
        ref.tell_nowait("block")
        await entered.wait()
        ref.tell_nowait("queued")
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.tell, "parked")
            await wait_all_tasks_blocked()
            ref.cancel()
        await ref.wait_terminated()
        assert system.statistics().dead_letters == 2  # "queued" and "parked", once each


async def test_a_failure_policy_must_return_a_directive() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Crasher, on_failure=lambda _: "restart")  # type: ignore[arg-type, return-value]
        await ref.tell("crash")
        termination = await ref.wait_terminated()
    assert isinstance(termination.error, ConfigurationError)
    assert "Directive" in str(termination.error)


async def test_ended_watchers_are_not_kept_by_their_targets() -> None:
    notices: list[Termination] = []
    async with ActorSystem() as system:
        target = await system.spawn(Recorder)
        watcher = await system.spawn(Watcher, notices, anyio.Event())
        await watcher.ask(target)
        cell = target._cell  # a reference sees its cell through a CellView: narrow it
        assert isinstance(cell, Cell)
        assert cell._watchers
        watcher.stop()
        await watcher.wait_terminated()
        assert not cell._watchers


async def test_closing_the_receive_side_wakes_a_waiting_receiver() -> None:
    from arkhon_rheo.actors import open_mailbox
    from arkhon_rheo.errors import MailboxClosed

    tx, rx = open_mailbox[int](1)
    errors: list[Exception] = []

    async def consumer() -> None:
        try:
            await rx.receive()
        except MailboxClosed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        await wait_all_tasks_blocked()
        rx.close()
    tx.close()
    assert len(errors) == 1


def test_native_asyncio_cancel_of_a_parked_sender_is_not_swallowed() -> None:
    import asyncio

    from arkhon_rheo.actors import open_mailbox

    async def main() -> bool:
        tx, rx = open_mailbox[int](1)
        tx.send_nowait(0)
        sender = asyncio.create_task(tx.send(1))
        await asyncio.sleep(0)
        rx.receive_nowait()  # hands the parked item over...
        sender.cancel()  # ...and a plain asyncio cancel arrives in the same step
        try:
            await sender
        except asyncio.CancelledError:
            return True
        finally:
            tx.close()
            rx.close()
        return False

    assert asyncio.run(main())


class CancelReader(Actor[str, None]):
    """Notes what `ActorContext.cancel_called` says before and after a cancel it makes."""

    def __init__(self, seen: list[bool]) -> None:
        self.seen = seen

    async def receive(self, message: str) -> None:
        self.seen.append(self.context.cancel_called)
        if message == "self":
            self.context.ref.cancel()
        else:  # the system's task group: what leaving the system's block cancels
            group = self.context.system._task_group
            assert group is not None
            group.cancel_scope.cancel()
        self.seen.append(self.context.cancel_called)


@pytest.mark.parametrize("whom", ["self", "system"])
async def test_cancel_called_reports_a_cancel_without_a_checkpoint(whom: str) -> None:
    seen: list[bool] = []
    async with ActorSystem() as system:
        ref = await system.spawn(CancelReader, seen)
        await ref.tell(whom)
        termination = await ref.wait_terminated()
        assert termination.kind is TerminationKind.CANCELLED
    assert seen == [False, True]
