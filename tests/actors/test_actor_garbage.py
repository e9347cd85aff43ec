"""An ended actor is freed by reference counting: it leaves no cyclic garbage.

A cell, its reference and its termination used to refer to one another
(cell -> ref -> cell, cell -> termination -> ref), so every ended actor, with
all it held, waited for the cyclic GC. Each test runs with the collector off,
so that what it finds is what the actors left, not what the collector already
took; each collects first, inside its event loop (whose setup leaves some).
"""

from __future__ import annotations

import gc
import weakref

import anyio
import pytest

from arkhon_rheo.actors import ActorSystem, Termination, TerminationKind
from tests.support.helpers import Recorder, Watcher, cyclic_garbage_of

pytestmark = pytest.mark.anyio

#: What an actor is made of: its cell, reference, mailbox, instance and context.
ACTOR_PARTS = (
    "_SystemCell",
    "ActorRef",
    "Termination",
    "MailboxSendStream",
    "MailboxReceiveStream",
    "_State",
    "LazyEvent",
    "Recorder",
    "ActorContext",
)


class Marker:
    """An argument of an actor's factory: its cell keeps it (for a restart) while it lives."""


class Marked(Recorder):
    def __init__(self, marker: Marker) -> None:
        super().__init__()
        self.marker = marker


@pytest.mark.usefixtures("collector_off")
async def test_an_ended_actor_is_freed_once_its_reference_is_dropped() -> None:
    gc.collect()
    async with ActorSystem() as system:
        marker = Marker()
        ref = await system.spawn(Marked, marker)
        assert await ref.ask("hello") == "hello"
        ref.stop()
        termination = await ref.wait_terminated()
        kept, gone = weakref.ref(marker), weakref.ref(ref)
        del ref, termination, marker
        # Freed by reference counting, the collector being off: the reference,
        # and its cell (which held the factory's arguments).
        assert gone() is None
        assert kept() is None
        assert system.statistics().alive == 0


@pytest.mark.usefixtures("collector_off")
async def test_ended_actors_leave_no_cyclic_garbage() -> None:
    gc.collect()
    async with ActorSystem() as system:
        for _ in range(20):
            ref = await system.spawn(Recorder)
            await ref.tell("message")
            ref.stop()
            await ref.wait_terminated()
        del ref
    assert cyclic_garbage_of(*ACTOR_PARTS) == []


async def test_an_ended_actors_termination_names_its_reference() -> None:
    notices: list[Termination] = []
    async with ActorSystem() as system:
        ref = await system.spawn(Recorder)
        ref.stop()
        termination = await ref.wait_terminated()
        assert termination.actor is ref
        assert termination.kind is TerminationKind.NORMAL
        assert ref.termination == termination  # built when asked, equal each time
        arrived = anyio.Event()
        watcher = await system.spawn(Watcher, notices, arrived)
        await watcher.ask(ref)  # watching an ended actor: the notice comes at once
        await arrived.wait()
    assert notices == [termination]
    assert notices[0].actor is ref
