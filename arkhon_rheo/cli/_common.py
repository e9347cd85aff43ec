"""What every command shares: exit codes, the command error, targets, JSON and output.

Output never reads text as rich markup: session ids, state values and error
messages come from the store or the user, so `console` has markup and emoji
codes off (styles are given as `Text` spans, see `styled`), and `shown` makes
terminal control characters visible as escapes.

Exit statuses (documented in the docs' command line reference):

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

import contextlib
import json
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from .._errors import CommandError
from .._errors._cli import ExitStatus
from .._json import JsonSyntaxError, read_json
from .._redact import scrub_secrets
from ..store._seams import StoreLocation

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "DEFAULT_STORE",
    "CommandError",
    "ExitStatus",
    "console",
    "existing_store",
    "parse_json",
    "print_json",
    "quoted",
    "read_only_store",
    "shown",
    "store_file",
    "styled",
]

#: The store file every command uses unless ``--store`` says otherwise.
DEFAULT_STORE = "arkhon-rheo.db"


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current ``sys.stdout`` (or ``sys.stderr``).

    Lines are not wrapped at 80 columns when the output is not a terminal:
    a table piped to a file keeps its rows whole. Strings are printed as they
    are: no markup, no emoji codes, no highlighting (style with `styled`).
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(
        file=stream, width=width, highlight=False, soft_wrap=True, markup=False, emoji=False
    )


#: C0 controls but tab and newline, DEL and C1 controls, as their Python escapes.
_CONTROLS = {
    code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\t\n"
}


def shown(value: object) -> str:
    r"""``value`` as text safe for a terminal: control characters made visible (``\x1b``).

    A session id or an error message from the store could otherwise clear the
    screen, retitle the terminal or hide what follows it. Registered secrets (a
    PostgreSQL URL's password) are masked.
    """
    return scrub_secrets(str(value)).translate(_CONTROLS)


def styled(*parts: str | tuple[object, str]) -> Text:
    """One line of output: strings as they are, ``(value, style)`` pairs styled.

    Every part is passed through `shown`; nothing is read as markup.
    """
    text = Text()
    for part in parts:
        if isinstance(part, tuple):
            text.append(shown(part[0]), style=part[1])
        else:
            text.append(shown(part))
    return text


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (for scripts: ``--json``)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


#: How much of a bad JSON argument an error message quotes.
_QUOTED = 60


def quoted(text: str) -> str:
    """``text`` as an error message quotes an argument: its first characters only, if long.

    A long argument (a pasted document, a token in it) is never echoed whole.
    """
    return repr(text) if len(text) <= _QUOTED else f"{text[:_QUOTED]!r}... ({len(text)} chars)"


def parse_json(text: str, *, what: str) -> Any:
    """``text`` parsed as JSON (with `read_json`: deep nesting and huge integers refused).

    Raises:
        CommandError: If it is not JSON Python can read (exit status 2), saying
            where; a long text is quoted only in part.
    """
    try:
        return read_json(text)
    except ValueError as exc:
        hint = "; quote strings, e.g. '\"text\"'" if isinstance(exc, JsonSyntaxError) else ""
        raise CommandError(
            f"{what} is not valid JSON ({exc}): {quoted(text)}{hint}", code=ExitStatus.USAGE
        ) from None


def store_file(path: str) -> str:
    """``path`` if a store file may be there: a regular file, or nothing yet.

    Raises:
        CommandError: If something else is there (exit status 2): a directory,
            a FIFO, a socket or a device: never a store, and reading one
            could block forever.
    """
    where = StoreLocation(path)  # a URL's password is registered: never shown
    try:
        kind = where.not_a_file()
    except OSError as exc:
        raise CommandError(
            f"cannot use {path!r} as the store: {exc}", code=ExitStatus.USAGE
        ) from None
    if kind is not None:
        raise CommandError(
            f"{path!r} is {kind}, not a regular file: pass --store with the path of a "
            "store file (or of one to create)",
            code=ExitStatus.USAGE,
        )
    return path


def store_label(path: str) -> str:
    """``path`` as a summary may show it: a ``postgresql://`` URL without its password."""
    return StoreLocation(path).shown


def existing_store(path: str) -> str:
    """``path`` if a store is there; the file is read (its header), never created or changed.

    Raises:
        CommandError: If there is no such file (exit status 3), something other
            than a regular file is there (2), or an empty file (1).
        StoreCorrupt: If the file is not a store (another application's, not
            SQLite at all) or of a schema version this code cannot read (1).
    """
    where = StoreLocation(store_file(path))
    if where.url:
        return path
    if not os.path.exists(path):
        raise CommandError(
            f"no store file at {path!r}; pass --store PATH, or create one with "
            "`arkhon-rheo demo` or `arkhon-rheo run MODULE:ATTR`",
            code=ExitStatus.NOT_FOUND,
        )
    if where.is_new():  # empty: opening it would write a new store into it
        raise CommandError(
            f"{path} is empty: not an arkhon-rheo store. It was left untouched; pass --store "
            "with a store's path, or create one with `arkhon-rheo run MODULE:ATTR` or "
            "`arkhon-rheo demo`",
            code=ExitStatus.FAILED,
        )
    return path


@contextlib.contextmanager
def read_only_store(path: str) -> Iterator[str]:
    """The store to read for ``path``: ``path`` itself, or an upgraded temporary copy of it.

    A store of an older schema version is upgraded when it is opened; a command
    that only reads must leave the file as it is (bytes and modification time,
    no ``-wal``/``-shm`` left), so it reads a copy in a temporary folder instead
    (the file and its write-ahead log copied as bytes: the original is never
    opened by SQLite), upgraded there and deleted afterwards. One line on
    stderr says so, and how to upgrade the file for real.

    Raises:
        CommandError: As `existing_store`.
        StoreCorrupt: As `existing_store`.
    """
    existing_store(path)
    version = StoreLocation(path).older_version()
    if version is None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="arkhon-rheo-read-") as folder:
        copy = os.path.join(folder, "store.db")
        shutil.copyfile(path, copy)
        if os.path.exists(path + "-wal"):  # committed transactions not yet in the file
            shutil.copyfile(path + "-wal", copy + "-wal")
        console(stderr=True).print(
            shown(
                f"note: {path} is a store of schema version {version}, older than this "
                "arkhon-rheo's: left unchanged, it was read from an upgraded temporary copy "
                "(to upgrade it for real, run a command that writes to it, such as resume or "
                "send, or open it with AgentSystem(path=...))"
            )
        )
        yield copy
