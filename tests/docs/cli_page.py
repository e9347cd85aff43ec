"""The command-line reference page, written from the real parsers of ``arkhon-rheo``.

``python -m tests.docs.cli_page`` (from the repository root) rewrites
``docs/reference/cli.md``; ``tests/docs/test_reference.py`` checks that every
subcommand and option of the parsers is on the page, so it cannot go stale.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from pathlib import Path

from arkhon_rheo.cli._app import build_parser
from arkhon_rheo.inspector.__main__ import main as inspector_main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"

_HEAD = """\
# Command line

`arkhon-rheo` (also `python -m arkhon_rheo`) runs, inspects and steers the sessions a store
keeps. It is installed with the package; `inspect` needs the `inspector` extra. Every command
that reads or writes sessions takes `--store` (an SQLite file, `./arkhon-rheo.db` by default, or
a `postgresql://` URL) and `--backend` (the event loop the command runs on). A command that
needs your machine names it as `MODULE:ATTR` (`-m examples.react_agent:agent`): a `Machine`, or a
function of no arguments returning one, imported from the current directory. Errors are one
line on stderr (`arkhon-rheo COMMAND: error: ...`) and an exit status, never a traceback.

This page is generated from the parsers themselves (`python -m tests.docs.cli_page`); how to
use the commands day to day is in [the command line how-to](../how-to/cli.md).

## Exit status

| Status | Meaning |
| --- | --- |
| 0 | Done. |
| 1 | Refused or failed: validation, divergence, a failed session, a damaged store. |
| 2 | Usage: a bad argument, bad JSON, a machine that does not match the session. |
| 3 | Not found: the store file, the session, the module or its attribute. |
| 4 | Locked: another process (or another call) drives the session. |

## `arkhon-rheo`

```text
{usage}
```

| Option | Description |
| --- | --- |
| `-h`, `--help` | Show the help and exit. |
| `--version` | Show the program's version and exit. |

| Command | What it does |
| --- | --- |
{commands}
"""


#: What a positional argument without a help text is.
_POSITIONALS = {
    "SESSION": "the session's id",
    "SEQ": "an event's number in the session's log",
    "MODULE:ATTR": "the machine: a `Machine`, or a function of no arguments returning one",
    "MODULE:ATTR|SESSION": "a machine, or a session's id with `--session`",
}


def _cell(text: str | None) -> str:
    text = (text or "").replace("|", "\\|").replace("\n", " ")
    return text[:1].upper() + text[1:]


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is False or default == [] or action.required:
        return ""
    return f"`{action.default}`"


def _argument(action: argparse.Action) -> str:
    if action.choices is not None:
        return "`{" + ",".join(map(str, action.choices)) + "}`"
    if action.nargs == 0:
        return ""
    return f"`{action.metavar or action.dest.upper()}`"


def _row(action: argparse.Action) -> str:
    names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar}`"
    notes = []
    if action.required and action.option_strings:
        notes.append("required")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
        notes.append("repeatable")
    help_text = _cell(action.help) + (f" ({', '.join(notes)})" if notes else "")
    return f"| {names} | {_argument(action)} | {_default(action)} | {help_text} |"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser``, by name, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("arkhon-rheo has no subcommands")


def inspector_help() -> str:
    """The help of ``arkhon-rheo inspect`` (the inspector parses its own options)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        inspector_main(["--help"])
    return out.getvalue().strip()


def _command(name: str, sub: argparse.ArgumentParser) -> str:
    if name == "inspect":
        return (
            "## `arkhon-rheo inspect`\n\nServe the session inspector page (the `inspector` "
            "extra). A token for changes comes from `--token-file` or the "
            "`ARKHON_INSPECTOR_TOKEN` environment variable, never from the command line; "
            "see [the inspector how-to](../how-to/inspector.md).\n\n```text\n"
            f"{inspector_help()}\n```\n"
        )
    usage = sub.format_usage().strip().removeprefix("usage: ")
    lines = [f"## `arkhon-rheo {name}`", "", _cell(sub.description), "", "```text", usage, "```"]
    positionals = [a for a in sub._actions if not a.option_strings]
    options = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    if positionals:
        lines += ["", "| Argument | Values | Description |", "| --- | --- | --- |"]
        for action in positionals:
            values = _argument(action) if action.choices is not None else ""
            name = str(action.metavar or action.dest)
            text = _cell(action.help or _POSITIONALS.get(name, ""))
            lines.append(f"| `{name}` | {values} | {text} |")
    lines += ["", "| Option | Argument | Default | Description |", "| --- | --- | --- | --- |"]
    lines += [_row(action) for action in options]
    return "\n".join(lines) + "\n"


def render() -> str:
    """The whole page, as markdown."""
    # argparse wraps usage lines at the terminal's width; the caller's value comes back after
    # (a test rendering the page must not change the width the CLI tests print at).
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = build_parser()
        subs = subcommands(parser)
        choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        helps = {action.dest: action.help for action in choices._choices_actions}
        table = "\n".join(
            f"| [`{name}`](#arkhon-rheo-{name}) | {_cell(helps.get(name))} |" for name in subs
        )
        usage = parser.format_usage().strip().removeprefix("usage: ")
        head = _HEAD.format(usage=usage, commands=table)
        return head + "\n" + "\n".join(_command(name, sub) for name, sub in subs.items())
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
