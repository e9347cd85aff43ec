"""Every command's ``--help`` has a description and shows each option's default."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from arkhon_rheo.cli import main
from arkhon_rheo.cli._app import build_parser


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: dict[str, argparse.ArgumentParser] = sub.choices
    return found


def shows_default(default: object) -> bool:
    """Whether a default is worth showing: not None, not a flag's False, not an empty list."""
    return not (default is None or default is False or default == [] or default == "==SUPPRESS==")


def help_text(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--help"]) == 0
    return out.getvalue()


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_command_has_a_description_and_shows_its_defaults(name: str) -> None:
    text = help_text(name)
    description = text.partition("\n\n")[2].split("\n\n")[0]
    assert not description.startswith(("options:", "positional")), text
    assert len(description) > 20
    if name == "inspect":  # its own parser: see below
        return
    for action in commands()[name]._actions:
        if action.option_strings and shows_default(action.default):
            assert f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)
    assert "--debug" in text


def test_inspect_help_shows_its_defaults() -> None:
    text = " ".join(help_text("inspect").split())
    assert "(default: 8765)" in text
    assert "(default: 127.0.0.1)" in text
    assert "(default: arkhon-rheo.db)" in text
    assert "serve the session inspector" in text


def test_defaults_are_shown_for_the_store_and_the_demo() -> None:
    text = " ".join(help_text("demo").split())
    for shown in ("(default: 300)", "(default: 0.2)", "(default: 0)", "(default: asyncio)"):
        assert shown in text
    assert "(default: None)" not in text
    assert "(default: False)" not in text
