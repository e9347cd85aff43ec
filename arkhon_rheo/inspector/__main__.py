"""Serve the inspector: ``python -m arkhon_rheo.inspector --store PATH [--machine M:ATTR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .._errors import ArkhonError
from ..protocols._seams import load_machine
from ._serve import serve

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and serve until interrupted; return the exit status."""
    parser = argparse.ArgumentParser(prog="arkhon-rheo inspect")
    parser.add_argument("--store", default="arkhon-rheo.db", help="the SQLite store file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0: any free port")
    parser.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a machine of the store's sessions (repeatable); needed to decide and replay",
    )
    parser.add_argument("--token", default=None, help="the token changes need (default: random)")
    parser.add_argument("--allow-remote", action="store_true", help="serve a non-loopback host")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    try:
        machines = [load_machine(spec) for spec in args.machine]
        if not Path(args.store).is_file():  # not found (3), as the command line says
            print(f"error: no store file at {args.store!r}", file=sys.stderr)
            return 3

        async def run() -> None:
            await serve(
                args.store,
                host=args.host,
                port=args.port,
                machines=machines,
                token=args.token,
                allow_remote=args.allow_remote,
            )

        anyio.run(run, backend=args.backend)
    except ArkhonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
