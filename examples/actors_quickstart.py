"""A first taste of the actor runtime: tell, ask, a crash, and death watch.

Run it with ``python examples/actors_quickstart.py [asyncio|trio]``.
"""

from __future__ import annotations

import sys

import anyio

from arkhon_rheo.actors import Actor, ActorRef, ActorSystem, Termination


class Counter(Actor[int, int]):
    """Adds up what it is told; answers an ask with the running total."""

    def __init__(self) -> None:
        self.total = 0

    async def receive(self, message: int) -> int:
        if message < 0:
            raise ValueError(f"cannot add a negative amount: {message}")
        self.total += message
        return self.total


class Undertaker(Actor[None, None]):
    """Watches another actor and reports how it ended."""

    def __init__(self, target: ActorRef[int, int], done: anyio.Event) -> None:
        self.target = target
        self.done = done

    async def on_start(self) -> None:
        self.context.watch(self.target)

    async def on_terminated(self, notice: Termination) -> None:
        print(f"{notice.actor.name} ended: {notice.kind.value} ({notice.error!r})")
        self.done.set()


async def main() -> None:
    async with ActorSystem() as system:
        counter = await system.spawn(Counter, name="counter")
        done = anyio.Event()
        await system.spawn(Undertaker, counter, done, name="undertaker")

        for amount in (1, 2, 3):
            await counter.tell(amount)  # waits only if the mailbox is full
        print("total:", await counter.ask(4, timeout=1.0))

        try:
            await counter.ask(-1)  # the handler's error comes back to the asker...
        except ValueError as exc:
            print("the ask failed:", exc, exc.__notes__)
        await done.wait()  # ...and the crash ends the actor; its watcher hears of it
        print("actors still alive:", system.statistics().alive)


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
