"""The reference pages cannot go stale: each is checked against what it describes.

The command line's page against the real parsers, the store schema's against a
live store file (and the PostgreSQL schema's statements), the exceptions page
against `arkhon_rheo.errors`, the API pages against each package's ``__all__``.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
from pathlib import Path

import anyio
import pytest

import arkhon_rheo
import arkhon_rheo.errors
from arkhon_rheo.cli._app import build_parser
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._postgres_schema import _SCHEMA as POSTGRES_SCHEMA

from . import PACKAGES
from .cli_page import inspector_help, subcommands

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
REGENERATE = "run `python -m tests.docs.cli_page` to rewrite docs/reference/cli.md"


def _page(name: str) -> str:
    return (REFERENCE / name).read_text(encoding="utf-8")


def _section(page: str, heading: str) -> str:
    """The text of ``page`` under ``heading`` up to the next heading of its level or higher."""
    level = heading.split(" ", 1)[0]
    start = page.index(heading + "\n")
    rest = page[start + len(heading) :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[: ends[0]] if ends else rest


def test_every_subcommand_and_option_of_the_parser_is_on_the_cli_page() -> None:
    page = _page("cli.md")
    subs = subcommands(build_parser())
    assert len(subs) >= 10
    for name, parser in subs.items():
        section = _section(page, f"## `arkhon-rheo {name}`")
        if name == "inspect":
            options = set(re.findall(r"--[a-z][a-z-]*", inspector_help()))
            assert options, "the inspector's help lists no options"
            missing = sorted(o for o in options if f"`{o}`" not in section and o not in section)
        else:
            missing = []
            for action in parser._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                names = action.option_strings or [str(action.metavar or action.dest)]
                missing += [n for n in names if f"`{n}`" not in section]
        assert not missing, f"arkhon-rheo {name}: {missing} not on the page; {REGENERATE}"


def test_the_cli_page_lists_no_subcommand_the_parser_lacks() -> None:
    documented = set(re.findall(r"^## `arkhon-rheo ([a-z-]+)`$", _page("cli.md"), re.M))
    assert documented == set(subcommands(build_parser())), REGENERATE


def test_every_table_column_and_index_of_a_live_sqlite_store_is_on_the_schema_page(
    tmp_path: Path,
) -> None:
    path = tmp_path / "schema.db"

    async def create() -> None:
        async with SQLiteStore(path):
            pass

    anyio.run(create)
    page = _page("store-schema.md")
    sqlite_part = _section(page, "## SQLite (schema version 8)")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 8
        objects = db.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        tables = [name for kind, name in objects if kind == "table"]
        indexes = [name for kind, name in objects if kind == "index"]
        assert {"sessions", "events", "snapshots", "inbox", "effects"} <= set(tables)
        for table in tables:
            section = _section(sqlite_part, f"### `{table}`")
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            missing = [c for c in columns if f"| `{c}` |" not in section]
            assert not missing, f"columns of {table} not on the page: {missing}"
    missing_indexes = [i for i in indexes if f"`{i}`" not in sqlite_part]
    assert not missing_indexes, f"indexes not on the page: {missing_indexes}"


def test_every_postgres_table_column_and_index_is_on_the_schema_page() -> None:
    postgres_part = _section(_page("store-schema.md"), "## PostgreSQL (schema version 1)")
    sqlite_part = _section(_page("store-schema.md"), "## SQLite (schema version 8)")
    seen = 0
    for statement in POSTGRES_SCHEMA:
        if match := re.match(r"CREATE INDEX (\w+)", statement):
            assert f"`{match[1]}`" in postgres_part, f"index {match[1]} not on the page"
            continue
        match = re.match(r"CREATE TABLE (\w+) \((.*)\)$", statement, re.S)
        assert match, statement
        table, body = match[1], match[2]
        seen += 1
        columns = [
            part.split()[0]
            for part in re.split(r",\s*(?![^()]*\))", body)
            if not part.strip().startswith(("PRIMARY KEY", "UNIQUE"))
        ]
        described = _section(sqlite_part, f"### `{table}`") + postgres_part
        missing = [
            c for c in columns if f"`{c}`" not in described and f"`{table}.{c}`" not in described
        ]
        assert not missing, f"PostgreSQL columns of {table} not on the page: {missing}"
    assert seen == 8


def test_every_exception_class_of_arkhon_rheo_errors_is_on_the_exceptions_page() -> None:
    page = _page("exceptions.md")
    classes = [
        name
        for name in arkhon_rheo.errors.__all__
        if isinstance(getattr(arkhon_rheo.errors, name), type)
        and issubclass(getattr(arkhon_rheo.errors, name), BaseException)
    ]
    assert len(classes) >= 40
    tree = page.split("\n## ")[0]  # the tree, before the page's sections
    lines = {m[2]: m[1] for m in re.finditer(r"^( *)- \[`(\w+)`\]", tree, re.M)}
    missing = [name for name in classes if name not in lines]
    assert not missing, f"exceptions not on the page: {missing}"
    # The tree's indentation is the class hierarchy: each under its first base.
    depth = {name: len(lines[name]) // 4 for name in classes}
    for name in classes:
        base = getattr(arkhon_rheo.errors, name).__bases__[0]
        if base is not Exception:
            assert depth[name] == depth[base.__name__] + 1, f"{name} is not under {base.__name__}"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_api_page_documents_its_package(package: str) -> None:
    page = (REFERENCE / "api" / f"{package}.md").read_text(encoding="utf-8")
    assert f"::: arkhon_rheo.{package}\n" in page
    intro = page.split(":::")[0]
    assert len(intro.split()) > 30, "each API page opens with a paragraph on its package"


def test_the_top_level_api_page_lists_the_fifty_names() -> None:
    page = (REFERENCE / "api" / "index.md").read_text(encoding="utf-8")
    assert len(arkhon_rheo.__all__) == 50
    missing = [name for name in arkhon_rheo.__all__ if f"[`{name}`]" not in page]
    assert not missing, f"names of arkhon_rheo not on its page: {missing}"


def test_the_performance_page_names_the_command_of_every_bench() -> None:
    page = (REFERENCE.parent / "explanation" / "performance.md").read_text(encoding="utf-8")
    benches = sorted(p.name for p in (REFERENCE.parents[1] / "bench").glob("[a-z]*.py"))
    assert len(benches) >= 10
    missing = [name for name in benches if f"`python bench/{name}`" not in page]
    assert not missing, f"benches whose command the performance page lacks: {missing}"
