"""``main(argv)``: the parser of ``arkhon-rheo``, the dispatch, and errors turned into exit codes.

Each command is a function of the parsed arguments returning an `ExitStatus`;
commands that touch the store run their async part with ``args.run(fn,
*args)`` on the backend ``--backend`` names. Every error the library raises
for bad input (and `CommandError`) becomes one line on stderr and an exit
status, never a traceback; see `ExitStatus` for the codes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

from .._errors import (
    ArkhonError,
    ConfigurationError,
    SessionBusy,
    SessionLocked,
    SessionNotFound,
)
from .._errors._cli import run_on
from ._check import check
from ._common import (
    DEFAULT_STORE,
    CommandError,
    ExitStatus,
    existing_store,
    read_only_store,
    shown,
)
from ._demo_workers import demo_command
from ._read import graph, list_sessions, show
from ._serve import SERVE_HELP, serve, serve_arguments
from ._steer import decide, fork, replay, resume, rollback, run
from ._talk import ask, send
from ._worker import worker

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    #: ``add(name, handler, help)``: a new subcommand's parser.
    _Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]

__all__ = ["build_parser", "main"]

_EPILOG = """exit status: 0 done; 1 refused or failed (validation, divergence, a failed
session, a damaged store); 2 usage (bad argument, bad JSON, a machine that does not
match the session); 3 not found (store file, session, module); 4 locked (another
process drives the session)."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default, where it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _common(parser: argparse.ArgumentParser, *, json: bool = True) -> None:
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        metavar="PATH|URL",
        help="the SQLite store file, or a postgresql:// URL",
    )
    parser.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="the event loop"
    )
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, print its full traceback too (an error in your module included)",
    )


def _machine(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument(
        "--machine",
        "-m",
        required=required,
        metavar="MODULE:ATTR",
        help="the session's machine: a Machine, or a function of no arguments returning one",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``arkhon-rheo``, every command included."""
    import arkhon_rheo  # the facade, for its version (imported here: it imports this package)

    __version__ = arkhon_rheo.__version__
    parser = argparse.ArgumentParser(
        prog="arkhon-rheo",
        description="arkhon-rheo: supervised agent sessions - run, inspect and steer them. "
        "Every command takes --debug: an error's full traceback, after its one line.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"arkhon-rheo {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], text: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, help=text, description=text, epilog=_EPILOG, formatter_class=HelpFormatter
        )
        sub.set_defaults(handler=handler)
        return sub

    _add_demo(add)
    _add_read_commands(add)
    _add_session_commands(add)
    _add_steering_commands(add)
    _add_worker(add)
    _add_serve(add)
    sub = commands.add_parser(
        "inspect",
        help="serve the session inspector page ('inspector' extra); --help for its options",
        add_help=False,
    )
    sub.add_argument("args", nargs=argparse.REMAINDER)
    sub.set_defaults(handler=inspect)
    return parser


def _add_demo(add: _Add) -> None:
    """``demo``: the seeded fault-plan run of many ReAct agents."""
    sub = add(
        "demo", demo_command, "run a few hundred supervised ReAct agents under a seeded fault plan"
    )
    _common(sub)
    sub.add_argument("--sessions", type=_positive, default=300, help="agents to run")
    sub.add_argument("--concurrency", type=_positive, default=100, help="agents at once")
    sub.add_argument(
        "--seed", type=int, default=0, help="seeds the fault plan, the gates and the backoff"
    )
    sub.add_argument(
        "--fault-rate",
        type=_rate,
        default=0.2,
        help="share of model calls answered 429; the plan's other faults scale with it",
    )
    sub.add_argument(
        "--gate-rate", type=_rate, default=0.05, help="chance an agent pauses for a human"
    )
    sub.add_argument(
        "--workers",
        type=_natural,
        default=0,
        help="submit the agents and run them in N 'arkhon-rheo worker' processes (no faults, "
        "no gates); 0 runs them here",
    )


def _add_worker(add: _Add) -> None:
    """``worker``: claim and drive the sessions of some machines, until SIGTERM."""
    sub = add(
        "worker",
        worker,
        "drive the sessions of MODULE:ATTR machines that the store has work for (SIGTERM drains)",
    )
    _common(sub)
    sub.add_argument(
        "--machine",
        "-m",
        action="append",
        required=True,
        metavar="MODULE:ATTR",
        help="a machine whose sessions it drives (repeatable)",
    )
    sub.add_argument("--concurrency", type=_positive, default=16, help="sessions driven at once")
    sub.add_argument(
        "--lease-ttl",
        type=_seconds,
        default=30.0,
        help="each session's lease, in seconds: a dead worker's sessions wait this long",
    )
    sub.add_argument(
        "--poll",
        type=_seconds,
        default=1.0,
        help="the longest wait before looking in the store again, in seconds",
    )
    sub.add_argument(
        "--max-claims",
        type=_natural,
        default=5,
        help="fail a session claimed this many times without a commit (a step that kills "
        "its worker); 0: never",
    )


def _add_serve(add: _Add) -> None:
    """``serve``: serve agents over A2A until SIGTERM."""
    sub = add("serve", serve, SERVE_HELP)
    _common(sub, json=False)
    serve_arguments(sub)


def _add_read_commands(add: _Add) -> None:
    """``sessions``, ``show``, ``graph``: read the store or a machine, change nothing."""
    sub = add("sessions", list_sessions, "list the stored sessions (no machine needed)")
    _common(sub)
    sub.add_argument(
        "--status", action="append", help="only this status (repeatable): running, paused, ..."
    )
    sub.add_argument("--limit", type=_positive, help="only the last N")

    sub = add("show", show, "a session's event history as a table (no machine needed)")
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    _machine(sub, required=False)  # optional: a paused session's gate field and its type

    sub = add("graph", graph, "Mermaid stateDiagram of a machine (MODULE:ATTR) or a session's path")
    _common(sub)
    sub.add_argument("target", metavar="MODULE:ATTR|SESSION")
    sub.add_argument("--session", action="store_true", help="read TARGET as a session id")
    _machine(sub, required=False)
    sub.add_argument("--output", "-o", metavar="FILE", help="write the diagram to FILE")


def _add_session_commands(add: _Add) -> None:
    """``run``, ``resume``: drive a session of a machine until it ends."""
    sub = add("run", run, "start a session of MODULE:ATTR and wait for its end")
    _common(sub)
    sub.add_argument("target", metavar="MODULE:ATTR")
    sub.add_argument("--input", metavar="JSON", help="the initial state's fields, as JSON")
    sub.add_argument(
        "--text",
        metavar="TEXT",
        help="a conversational agent's first user message (its task); it parks for the next",
    )
    sub.add_argument("--session-id", metavar="ID", help="the new session's id")
    sub.add_argument("--max-steps", type=_positive, help="the step budget")

    sub = add(
        "send",
        send,
        "send a session a message; drive it until it waits or ends, and print its reply",
    )
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    _machine(sub)
    sub.add_argument(
        "--message", metavar="JSON", help="the message's fields, its kind's name under 'kind'"
    )
    sub.add_argument("--text", metavar="TEXT", help="a user message to a conversational agent")
    sub.add_argument("--message-id", metavar="ID", help="its id: a re-send stores nothing")

    sub = add(
        "ask",
        ask,
        "ask a session: store a message, wait for the reply to it (wherever the session "
        "runs), print it",
    )
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    _machine(sub)
    sub.add_argument(
        "--message", metavar="JSON", help="the message's fields, its kind's name under 'kind'"
    )
    sub.add_argument("--text", metavar="TEXT", help="a user message to a conversational agent")
    sub.add_argument(
        "--message-id", metavar="ID", help="its id: asking again returns the same reply"
    )
    sub.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="the longest wait for the reply"
    )
    sub.add_argument(
        "--no-drive",
        action="store_true",
        help="never drive the session here: a worker (or another process) applies the message",
    )

    sub = add("resume", resume, "continue a stored session and wait for its end")
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    _machine(sub)
    sub.add_argument("--max-steps", type=_positive, help="the step budget of this run")


def _add_steering_commands(add: _Add) -> None:
    """``decide``, ``rollback``, ``fork``, ``check``, ``replay``: steer or check stored sessions."""
    sub = add("decide", decide, "answer a session paused at a gate: approve, abort or edit")
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    sub.add_argument(
        "decision",
        choices=["approve", "abort", "edit", "resume"],
        help="approve (resume: the same), abort, or edit",
    )
    _machine(sub)
    sub.add_argument("--value", metavar="JSON", help="approve: the gate's answer, as JSON")
    sub.add_argument(
        "--set",
        action="append",
        metavar="FIELD=JSON",
        help="edit: a field's new value, as JSON (repeatable)",
    )

    sub = add("rollback", rollback, "return a stopped session to its state after event SEQ")
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    sub.add_argument("seq", type=_natural, metavar="SEQ")
    _machine(sub)

    sub = add("fork", fork, "start a new session from another's state after event SEQ")
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    sub.add_argument("--at", type=_natural, metavar="SEQ", help="the event (default: the last)")
    sub.add_argument("--new-id", metavar="ID", help="the fork's id")
    _machine(sub)

    sub = add(
        "check",
        check,
        "before a deploy: load and replay every stored session of MODULE:ATTR's machine",
    )
    _common(sub)
    _machine(sub)

    sub = add("replay", replay, "fold a session's log and check each event's stored digest")
    _common(sub)
    sub.add_argument("session", metavar="SESSION")
    _machine(sub)
    sub.add_argument(
        "--reexecute", action="store_true", help="also run every stage again on its recorded calls"
    )


def inspect(args: argparse.Namespace) -> int:
    """``arkhon-rheo inspect ...``: the inspector's own command line (``--store``...)."""
    from ..inspector.__main__ import main as inspector_main

    arguments = list(args.args)
    with contextlib.ExitStack() as stack:
        if not {"-h", "--help"} & set(arguments):
            # A file there must be a store already: the inspector would make one of an empty
            # file. (No file at all: the inspector says so, after its own checks.)
            options = argparse.ArgumentParser(add_help=False)
            options.add_argument("--store", default=DEFAULT_STORE)
            options.add_argument("--machine", action="append", default=[])
            known = options.parse_known_args(arguments)[0]
            try:
                if os.path.lexists(known.store) and known.machine:
                    existing_store(known.store)  # it may decide: an old store is upgraded
                elif os.path.lexists(known.store):  # it only reads: an old one, from a copy
                    copy = stack.enter_context(read_only_store(known.store))
                    arguments += ["--store", copy]
            except ArkhonError as exc:
                sys.stderr.write(shown(f"arkhon-rheo inspect: error: {exc}") + "\n")
                return int(_exit_code(exc))
        try:
            return inspector_main(arguments)
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
            return int(exc.code or 0) if not isinstance(exc.code, str) else ExitStatus.USAGE


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _natural(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _rate(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def _exit_code(exc: ArkhonError) -> ExitStatus:
    """The exit status for an error the library raised."""
    if isinstance(exc, CommandError):
        return ExitStatus(exc.code)
    if isinstance(exc, SessionNotFound):
        return ExitStatus.NOT_FOUND
    if isinstance(exc, SessionLocked):
        return ExitStatus.LOCKED
    if isinstance(exc, SessionBusy):
        return ExitStatus.LOCKED
    if isinstance(exc, ConfigurationError):
        return ExitStatus.USAGE
    return ExitStatus.FAILED  # refused or failed: a contract, a session, the store


def _runner(backend: str) -> Callable[..., Any]:
    def run(fn: Callable[..., Any], *args: Any) -> Any:
        return run_on(backend, functools.partial(fn, *args))

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: The arguments, without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The exit status: 0 done, 1 refused or failed, 2 usage, 3 not found, 4 locked.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["inspect"]:  # the inspector parses its own options
        return inspect(argparse.Namespace(args=arguments[1:]))
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # argparse: --help, --version (0) or a usage error (2)
        return int(exc.code or 0) if not isinstance(exc.code, str) else ExitStatus.USAGE
    args.run = _runner(args.backend)
    try:
        return int(args.handler(args))
    except ArkhonError as exc:
        error: BaseException = exc
        line = str(exc)
        code = _exit_code(exc)
    except BaseExceptionGroup as group:  # from a task group: one library error inside
        matched, rest = group.split(ArkhonError)
        if matched is None or rest is not None:
            error, line, code = group, _unexpected(group), ExitStatus.FAILED
        else:
            error = _first(matched)
            line, code = str(error), _exit_code(_first(matched))
    except Exception as exc:  # not the library's word: still one line, the rest with --debug
        error, line, code = exc, _unexpected(exc), ExitStatus.FAILED
    if args.debug:
        traceback.print_exception(error, file=sys.stderr)
    sys.stderr.write(shown(f"arkhon-rheo {args.command}: error: {line}") + "\n")
    return int(code)


def _unexpected(exc: BaseException) -> str:
    """The line for an error the command did not expect: its type, its message, the way on."""
    message = " ".join(str(exc).split())
    return (
        f"unexpected {type(exc).__name__}: {message} (rerun with --debug for the traceback, "
        "and report it if the library is at fault)"
    )


def _first(group: BaseExceptionGroup[ArkhonError]) -> ArkhonError:
    """The first library error in a (possibly nested) exception group."""
    exc = group.exceptions[0]
    return _first(exc) if isinstance(exc, BaseExceptionGroup) else exc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
