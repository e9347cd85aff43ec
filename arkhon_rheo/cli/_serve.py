"""``arkhon-rheo serve``: serve agents over A2A (the ``a2a`` extra).

Each ``MODULE:ATTR`` agent is served with its card, over JSON-RPC and
server-sent events (see `arkhon_rheo.serve`): one at the root, several each
under ``/<machine name>``. It listens on 127.0.0.1 unless ``--allow-remote``,
which needs a token, read from ``--token-file`` (never from the command line,
which every user of the machine sees). SIGTERM or SIGINT stops it; the tasks
it was driving go on in another replica, a worker, or here once restarted.
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING, Any

import anyio

from ..core import Keyring
from ..inspector._seams import read_token_file
from ..serve import serve_a2a
from ._common import store_file
from ._load import load_machine

if TYPE_CHECKING:
    from ..protocols import Machine

__all__ = ["SERVE_HELP", "serve", "serve_arguments"]

#: The command's one line of help.
SERVE_HELP = (
    "serve MODULE:ATTR agents over A2A (JSON-RPC over HTTP, SSE), each with its agent card "
    "('a2a' extra); one at /, several each under /<machine name>"
)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def serve_arguments(sub: argparse.ArgumentParser) -> None:
    """The options of ``serve`` (beside ``--store``, ``--backend`` and ``--debug``)."""
    sub.add_argument("agent", nargs="+", metavar="MODULE:ATTR", help="an agent to serve")
    sub.add_argument("--host", default="127.0.0.1", help="the address to serve on")
    sub.add_argument("--port", type=int, default=8000, help="0: any free port")
    sub.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="a file holding the bearer token every request needs (needed with --allow-remote)",
    )
    sub.add_argument("--allow-remote", action="store_true", help="serve a non-loopback host")
    sub.add_argument(
        "--recover-every",
        type=_seconds,
        default=30.0,
        help="seconds between two looks for sessions whose driving process died (each reads "
        "every session's record)",
    )


async def _serve(args: argparse.Namespace, machines: list[Machine[Any]], token: str | None) -> None:
    async with anyio.create_task_group() as group:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:

            async def stop_on_signal() -> None:
                async for _ in received:
                    group.cancel_scope.cancel()

            group.start_soon(stop_on_signal)
            await serve_a2a(
                machines,
                store=args.store,
                host=args.host,
                port=args.port,
                token=token,
                allow_remote=args.allow_remote,
                secrets=Keyring.from_env(),
                recover_every=args.recover_every,
            )


def serve(args: argparse.Namespace) -> int:
    """``arkhon-rheo serve``: serve the agents until SIGTERM/SIGINT."""
    machines: list[Machine[Any]] = [load_machine(target) for target in args.agent]
    store_file(args.store)
    token = read_token_file(args.token_file) if args.token_file is not None else None
    args.run(_serve, args, machines, token)
    return 0
