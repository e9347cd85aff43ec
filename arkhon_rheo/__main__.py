"""The ``arkhon-rheo`` command line.

``arkhon-rheo demo`` runs a small supervised pipeline of actors and prints
what happens; ``arkhon-rheo --version`` prints the version.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import anyio

from . import __version__
from .actors import Actor, ActorRef, ActorSystem, Directive, Termination

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


class _Doubler(Actor[int, int]):
    """Doubles numbers; refuses negative ones by crashing (and is restarted)."""

    async def receive(self, message: int) -> int:
        if message < 0:
            raise ValueError(f"refusing negative input {message}")
        return message * 2


class _Reporter(Actor[int, None]):
    """Prints each result it is told, and the end of the actor it watches."""

    def __init__(self, watched: ActorRef[int, int]) -> None:
        self.watched = watched

    async def on_start(self) -> None:
        self.context.watch(self.watched)

    async def receive(self, message: int) -> None:
        print(f"  result: {message}")

    async def on_terminated(self, notice: Termination) -> None:
        print(f"  {notice.actor.name} ended ({notice.kind.value})")


async def _demo() -> None:
    async with ActorSystem(name="demo") as system:
        doubler = await system.spawn(
            _Doubler, name="doubler", on_failure=lambda _: Directive.RESTART
        )
        reporter = await system.spawn(_Reporter, doubler, name="reporter")
        for value in (1, 2, -3, 4):
            try:
                await reporter.ask(await doubler.ask(value, timeout=1.0))
            except ValueError as exc:
                print(f"  error from {doubler.name}: {exc} (it was restarted)")
        stats = doubler.statistics()
        handled, restarts = stats.delivered, doubler.restarts
        print(f"  {doubler.name}: {handled} messages handled, {restarts} restart(s)")
        doubler.stop()
        await doubler.wait_terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: The arguments, without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit status.
    """
    parser = argparse.ArgumentParser(
        prog="arkhon-rheo",
        description="arkhon-rheo: a supervised actor runtime for LLM agents, on anyio.",
    )
    parser.add_argument("--version", action="version", version=f"arkhon-rheo {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a small actor demo")
    demo.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args(argv)
    if args.command == "demo":
        print(f"arkhon-rheo demo on {args.backend}")
        anyio.run(_demo, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
