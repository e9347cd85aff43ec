"""Serve the inspector: ``python -m arkhon_rheo.inspector --store PATH [--machine M:ATTR]``.

A token of your own comes from a file (``--token-file PATH``) or the
environment (``ARKHON_INSPECTOR_TOKEN``), never from the command line, where
every user of the machine would see it in the process list.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import ArkhonError, CommandError, ConfigurationError
from .._errors._cli import ExitStatus, run_on
from .._load import load_target
from ..core import Keyring
from ..protocols import Machine
from ._serve import read_token_file as _read_token_file
from ._serve import serve

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["TOKEN_ENV", "main"]

#: The environment variable a token of your own may come from.
TOKEN_ENV = "ARKHON_INSPECTOR_TOKEN"


def _token(args: argparse.Namespace) -> str | None:
    """The token from ``--token-file`` or `TOKEN_ENV`; ``None``: make a random one."""
    if args.token is not None:
        raise ConfigurationError(
            f"--token is refused: a token on the command line is shown to every user of this "
            f"machine in the process list; put it in a file only you can read and pass "
            f"--token-file PATH, or set the environment variable {TOKEN_ENV}"
        )
    if args.token_file is not None:
        return _read_token_file(args.token_file)
    return os.environ.get(TOKEN_ENV, "").strip() or None


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default, where it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and serve until interrupted; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="arkhon-rheo inspect",
        description="serve the session inspector, a web page of the store's sessions: their "
        "events, state, graph and failures; with --machine, decide and replay them too "
        "(the 'inspector' extra)",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "--store", default="arkhon-rheo.db", help="the SQLite store file, or a postgresql:// URL"
    )
    parser.add_argument("--host", default="127.0.0.1", help="the address to serve on")
    parser.add_argument("--port", type=int, default=8765, help="0: any free port")
    parser.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a machine of the store's sessions (repeatable); needed to decide and replay",
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help=f"a file holding the token changes need (or set {TOKEN_ENV}; default: random)",
    )
    parser.add_argument(
        "--token", default=None, help=f"refused (visible to all): use --token-file or {TOKEN_ENV}"
    )
    parser.add_argument("--allow-remote", action="store_true", help="serve a non-loopback host")
    parser.add_argument(
        "--debug", action="store_true", help="on an error, print its full traceback too"
    )
    parser.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help="the event loop"
    )
    args = parser.parse_args(argv)
    try:
        token = _token(args)
        machines = [load_target(spec, Machine) for spec in args.machine]
        keyring = Keyring.from_env()  # the keys of sessions with sensitive fields, if set
        if not Path(args.store).is_file():  # not found, as the command line says
            print(f"error: no store file at {args.store!r}", file=sys.stderr)
            return ExitStatus.NOT_FOUND

        async def run() -> None:
            await serve(
                args.store,
                host=args.host,
                port=args.port,
                machines=machines,
                token=token,
                allow_remote=args.allow_remote,
                secrets=keyring,
            )

        run_on(args.backend, run)
    except ArkhonError as exc:
        if args.debug:
            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return exc.code if isinstance(exc, CommandError) else ExitStatus.USAGE
    except KeyboardInterrupt:
        return ExitStatus.OK
    return ExitStatus.OK


if __name__ == "__main__":
    sys.exit(main())
