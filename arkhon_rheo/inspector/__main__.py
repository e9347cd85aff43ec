"""Serve the inspector: ``python -m arkhon_rheo.inspector --store PATH [--machine M:ATTR]``."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ArkhonError, ConfigurationError
from ..protocols import Machine
from ._serve import serve

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["load_machine", "main"]


def load_machine(spec: str) -> Machine[Any]:
    """The machine named by ``MODULE:ATTR`` (an attribute, or a function that returns one).

    Raises:
        ConfigurationError: If the spec is malformed, the module or attribute is
            missing, or it is not a machine.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"a machine is given as MODULE:ATTR, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for {spec!r}: {exc}") from exc
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r}") from None
    if callable(value) and not isinstance(value, Machine | type):
        try:
            value = value()
        except Exception as exc:
            raise ConfigurationError(f"{spec!r} failed to make a machine: {exc!r}") from exc
    if not isinstance(value, Machine):
        raise ConfigurationError(f"{spec!r} is not a Machine (nor makes one): {value!r}")
    return value


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
        return 3 if "no store file" in str(exc) else 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
