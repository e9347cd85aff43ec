from __future__ import annotations

import gc

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from hypothesis import given, settings
from hypothesis import strategies as st

from arkhon_rheo import ConfigurationError
from arkhon_rheo.actors import open_mailbox
from arkhon_rheo.errors import MailboxClosed, MailboxFull

pytestmark = pytest.mark.anyio


async def test_fifo_and_statistics() -> None:
    tx, rx = open_mailbox[int](4, name="m")
    with tx:
        for i in range(3):
            await tx.send(i)
        assert tx.statistics().queued == 3
        assert [await rx.receive() for _ in range(3)] == [0, 1, 2]
    stats = rx.statistics()
    assert (stats.received, stats.delivered, stats.queued, stats.capacity) == (3, 3, 0, 4)
    assert stats.open_send_streams == 0
    with pytest.raises(anyio.EndOfStream):
        await rx.receive()
    rx.close()


async def test_send_nowait_full_raises_and_keeps_contents() -> None:
    tx, rx = open_mailbox[int](2, name="tiny")
    tx.send_nowait(1)
    tx.send_nowait(2)
    with pytest.raises(MailboxFull) as info:
        tx.send_nowait(3)
    assert info.value.capacity == 2
    assert info.value.mailbox == "tiny"
    assert "full" in str(info.value)
    tx.close()
    assert [item async for item in rx] == [1, 2]
    rx.close()


async def test_send_waits_for_room_in_arrival_order() -> None:
    tx, rx = open_mailbox[str](1)
    tx.send_nowait("first")
    order: list[str] = []

    async def sender(clone_item: str) -> None:
        with tx.clone() as clone:
            await clone.send(clone_item)
            order.append(clone_item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender, "a")
        await wait_all_tasks_blocked()
        tg.start_soon(sender, "b")
        await wait_all_tasks_blocked()
        assert tx.statistics().tasks_waiting_send == 2
        # A newcomer may not jump the queue of waiting senders.
        with pytest.raises(MailboxFull):
            tx.send_nowait("c")
        received = [await rx.receive() for _ in range(3)]
    assert received == ["first", "a", "b"]
    tx.close()
    rx.close()


async def test_cancelled_send_does_not_deliver() -> None:
    tx, rx = open_mailbox[str](1)
    tx.send_nowait("kept")
    with anyio.move_on_after(0):
        await tx.send("dropped")
    assert tx.statistics().tasks_waiting_send == 0
    tx.close()
    assert [item async for item in rx] == ["kept"]
    rx.close()


async def test_closing_receiver_wakes_waiting_senders() -> None:
    tx, rx = open_mailbox[int](1)
    tx.send_nowait(0)
    errors: list[Exception] = []

    async def sender() -> None:
        try:
            await tx.send(1)
        except MailboxClosed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await wait_all_tasks_blocked()
        leftover = rx.close()
    # The parked sender keeps its item and learns it was not delivered.
    assert leftover == [0]
    assert len(errors) == 1
    assert rx.statistics().dead_letters == 1
    with pytest.raises(MailboxClosed):
        tx.send_nowait(2)
    tx.close()


async def test_end_of_stream_only_after_every_clone_closes() -> None:
    tx, rx = open_mailbox[int](8)
    clone = tx.clone()
    tx.close()
    await clone.send(7)
    clone.close()
    assert [item async for item in rx] == [7]
    with pytest.raises(MailboxClosed):
        clone.clone()
    rx.close()


async def test_receive_waits_then_wakes() -> None:
    tx, rx = open_mailbox[int](1)
    got: list[int] = []

    async def consumer() -> None:
        async for item in rx:
            got.append(item)  # noqa: PERF401 - the test reads `got` while this runs

    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        await wait_all_tasks_blocked()
        await tx.send(5)
        await wait_all_tasks_blocked()
        assert got == [5]
        tx.close()
    rx.close()


async def test_busy_receive_loop_lets_other_tasks_run() -> None:
    """The fast path yields periodically, so a full mailbox cannot starve the loop."""
    tx, rx = open_mailbox[int](10_000)
    for i in range(10_000):
        tx.send_nowait(i)
    tx.close()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        async for _ in rx:
            pass
        tg.cancel_scope.cancel()
    assert ticks > 100
    rx.close()


def test_capacity_must_be_positive() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError, match="capacity"):
            open_mailbox(bad)  # type: ignore[arg-type]


def test_unclosed_mailbox_warns() -> None:
    sides = list(open_mailbox[int](1, name="leaky"))
    with pytest.warns(ResourceWarning, match="send side of mailbox 'leaky'"):
        sides.pop(0)
    with pytest.warns(ResourceWarning, match="receive side of mailbox 'leaky'"):
        sides.pop(0)
    gc.collect()


@settings(max_examples=50, deadline=None)
@given(
    plan=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=60),
    capacity=st.integers(min_value=1, max_value=4),
)
def test_per_sender_fifo_under_random_interleavings(plan: list[int], capacity: int) -> None:
    """Whatever the interleaving of four senders, each sender's items arrive in order."""

    async def main() -> list[tuple[int, int]]:
        tx, rx = open_mailbox[tuple[int, int]](capacity)
        counts = dict.fromkeys(range(4), 0)
        out: list[tuple[int, int]] = []

        async def sender(who: int, n: int, clone: object) -> None:
            assert clone is not None
            with clone as c:  # type: ignore[attr-defined]
                for seq in range(n):
                    await c.send((who, seq))
                    if (who + seq) % 2:
                        await anyio.lowlevel.checkpoint()

        for who in plan:
            counts[who] += 1
        async with anyio.create_task_group() as tg:
            for who, n in counts.items():
                tg.start_soon(sender, who, n, tx.clone())
            tx.close()
            out.extend([item async for item in rx])
        rx.close()
        return out

    for backend in ("asyncio", "trio"):
        out = anyio.run(main, backend=backend)
        assert len(out) == len(plan)
        for who in range(4):
            assert [seq for w, seq in out if w == who] == list(range(plan.count(who)))
