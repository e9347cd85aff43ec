"""What every command shares: exit codes, the command error, targets, JSON and output.

Exit codes (documented in the README, "Command line"):

====  ==================================================================
0     done
1     the operation was refused or failed (a validation error, a replay
      that diverged, a session that ended failed, a damaged store)
2     usage: a bad argument, bad JSON, a machine that does not match the
      session
3     not found: no store file, no such session, no such module or attribute
4     locked: another process drives the session (or another call here)
====  ==================================================================
"""

from __future__ import annotations

import enum
import importlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from .._errors import ArkhonError
from ..protocols import Machine

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DEFAULT_STORE",
    "CommandError",
    "Exit",
    "console",
    "existing_store",
    "load_machine",
    "parse_json",
    "print_json",
]

#: The store file every command uses unless ``--store`` says otherwise.
DEFAULT_STORE = "arkhon-rheo.db"


class Exit(enum.IntEnum):
    """The exit status of ``arkhon-rheo``."""

    #: Done.
    OK = 0
    #: The operation was refused or failed.
    FAILED = 1
    #: A bad argument: usage, JSON, a machine that does not fit the session.
    USAGE = 2
    #: No such store file, session, module or attribute.
    NOT_FOUND = 3
    #: Another process (or another call) drives the session.
    LOCKED = 4


class CommandError(ArkhonError):
    """A command cannot go on; its message says why and what to do.

    Attributes:
        code: The exit status the command ends with.
    """

    def __init__(self, message: str, *, code: Exit) -> None:
        super().__init__(message)
        self.code = code


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current ``sys.stdout`` (or ``sys.stderr``).

    Lines are not wrapped at 80 columns when the output is not a terminal:
    a table piped to a file keeps its rows whole.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(file=stream, width=width, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (for scripts: ``--json``)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def parse_json(text: str, *, what: str) -> Any:
    """``text`` parsed as JSON.

    Raises:
        CommandError: If it is not JSON (exit status 2), saying where.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{what} is not valid JSON ({exc.msg} at column {exc.colno}): {text!r}; "
            "quote strings, e.g. '\"text\"'",
            code=Exit.USAGE,
        ) from None


def existing_store(path: str) -> str:
    """``path`` if a store file exists there.

    Raises:
        CommandError: If there is no such file (exit status 3).
    """
    if not Path(path).is_file():
        raise CommandError(
            f"no store file at {path!r}; pass --store PATH, or create one with "
            "`arkhon-rheo demo` or `arkhon-rheo run MODULE:ATTR`",
            code=Exit.NOT_FOUND,
        )
    return path


def _resolve(target: str) -> Any:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise CommandError(
            f"expected MODULE:ATTR (like 'myagents:machine'), got {target!r}", code=Exit.USAGE
        )
    if os.getcwd() not in sys.path:  # as `python -m` would: modules beside you import
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise CommandError(
                f"no module {module_name!r} (from {target!r}); run from the folder that holds "
                "it, or set PYTHONPATH",
                code=Exit.NOT_FOUND,
            ) from None
        raise
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CommandError(
                f"module {module_name!r} has no attribute {attr!r}", code=Exit.NOT_FOUND
            ) from None
    return found


def load_machine(target: str) -> Machine[Any]:
    """The `Machine` named by ``MODULE:ATTR``: the attribute, or what calling it returns.

    Raises:
        CommandError: If the target is malformed (2), is missing (3), or is
            neither a machine nor a factory of one taking no arguments (2).
    """
    found = _resolve(target)
    if isinstance(found, Machine):
        return found
    if callable(found):
        factory: Callable[[], Any] = found
        try:
            made = factory()
        except TypeError as exc:
            raise CommandError(
                f"{target} is not a Machine, and calling it with no arguments failed: {exc}",
                code=Exit.USAGE,
            ) from None
        if isinstance(made, Machine):
            return made
        raise CommandError(
            f"{target}() returned {type(made).__name__}, not a Machine", code=Exit.USAGE
        )
    raise CommandError(
        f"{target} is a {type(found).__name__}: expected a Machine or a function that returns one",
        code=Exit.USAGE,
    )
