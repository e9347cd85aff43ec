"""The PostgreSQL schema: its tables, its version, and opening a database safely.

The store lives in one PostgreSQL schema (``arkhon_rheo`` unless told
otherwise) whose ``meta`` table names the application and the schema version.
Opening takes a transaction-scoped advisory lock on the schema's name first,
so several processes opening one database at once never race: the first
creates the tables, the others wait for its commit and then find them.

Upgrade path: `_UPGRADES` maps each older version to the statements that bring
it to the next one; opening an older store runs them, in order, in the opening
transaction (under the same lock), and records the new version. Version 1 is
the first, so the map is empty; a store of a newer version than this code
reads is refused (`StoreCorrupt`) and left untouched.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .._errors import ConfigurationError, StoreCorrupt

if TYPE_CHECKING:
    from ._driver import Script, Statement

__all__ = ["SCHEMA_VERSION", "check_schema_name", "prepare"]

#: The schema version this code reads and writes.
SCHEMA_VERSION = 1
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_TABLES = frozenset(
    {"meta", "sessions", "shapes", "events", "snapshots", "leases", "inbox", "effects"}
)
_SCHEMA = (
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    # ``accepts``: the message kinds a parked session takes (a post of one wakes it).
    """CREATE TABLE sessions (
        n bigserial PRIMARY KEY, id text NOT NULL UNIQUE, machine text NOT NULL,
        status text NOT NULL, last_seq bigint NOT NULL, created_at double precision NOT NULL,
        updated_at double precision NOT NULL, parent text, fingerprint text, waiting text,
        wake_at double precision, accepts text[])""",
    # What a worker claims: running or waiting sessions, by machine.
    """CREATE INDEX sessions_work ON sessions (machine, n)
        WHERE status IN ('running', 'waiting')""",
    "CREATE INDEX sessions_waking ON sessions (status, wake_at) WHERE wake_at IS NOT NULL",
    "CREATE TABLE shapes (id bigserial PRIMARY KEY, shape text NOT NULL UNIQUE)",
    """CREATE TABLE events (
        session bigint NOT NULL, seq bigint NOT NULL, shape bigint NOT NULL,
        patch bytea NOT NULL, attempt integer NOT NULL, started_at double precision NOT NULL,
        finished_at double precision NOT NULL, error text, io text, digest bigint,
        PRIMARY KEY (session, seq))""",
    # ``zipped``: the state is zlib-compressed JSON, else JSON text's bytes.
    """CREATE TABLE snapshots (
        session bigint NOT NULL, seq bigint NOT NULL, state bytea NOT NULL,
        zipped boolean NOT NULL, PRIMARY KEY (session, seq))""",
    # A released lease keeps its row (owner NULL) so its fencing token only grows.
    """CREATE TABLE leases (
        session_id text PRIMARY KEY, owner text, expires_at double precision NOT NULL,
        token bigint NOT NULL)""",
    """CREATE TABLE inbox (
        session bigint NOT NULL, position bigint NOT NULL, message_id text NOT NULL,
        kind text NOT NULL, payload text NOT NULL, posted_at double precision NOT NULL,
        due_at double precision NOT NULL, applied_seq bigint,
        PRIMARY KEY (session, position), UNIQUE (session, message_id))""",
    """CREATE INDEX inbox_pending ON inbox (session, due_at, position)
        WHERE applied_seq IS NULL""",
    """CREATE TABLE effects (
        n bigserial PRIMARY KEY, session bigint NOT NULL, key text NOT NULL, tool text NOT NULL,
        arguments text NOT NULL, status text NOT NULL, attempts integer NOT NULL,
        started_at double precision NOT NULL, finished_at double precision, result text,
        error text, UNIQUE (session, key))""",
)
_META = {"application": "arkhon-rheo", "schema_version": str(SCHEMA_VERSION)}
#: The statements that bring a store of each older version to the next one.
_UPGRADES: dict[int, tuple[str, ...]] = {}


def check_schema_name(name: str) -> str:
    """``name`` if it is a plain PostgreSQL schema name (lower case, digits, ``_``).

    Raises:
        ConfigurationError: It is not.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"schema must be a plain PostgreSQL name (a-z, 0-9 and _, up to 63 characters, "
            f"not starting with a digit), not {name!r}"
        )
    return name


def _sql(text: str, params: tuple[object, ...] = ()) -> Statement:
    return (text, params, False)


def _create(schema: str, location: str) -> Script[None]:
    tables = yield _sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
    )
    if tables:
        raise StoreCorrupt(
            f"schema {schema!r} of {location} holds tables of another application "
            f"({', '.join(sorted(row[0] for row in tables)[:5])}); it was left untouched: "
            "choose another schema for the store",
            location=location,
        )
    for statement in _SCHEMA:
        yield _sql(statement)
    yield ("INSERT INTO meta VALUES (%s, %s)", list(_META.items()), True)


def _verify(schema: str, location: str) -> Script[None]:
    meta: dict[str, str] = dict((yield _sql("SELECT key, value FROM meta")))
    if meta.get("application") != _META["application"]:
        raise StoreCorrupt(
            f"schema {schema!r} of {location} is not an arkhon-rheo store ({meta!r}); it was "
            "left untouched",
            location=location,
        )
    text = meta.get("schema_version", "0")
    if not text.isdigit():
        raise StoreCorrupt(
            f"{location} holds an arkhon-rheo store whose metadata names schema version "
            f"{text!r}, not a number; it is damaged and was left untouched: restore it from a "
            "backup",
            location=location,
        )
    version = int(text)
    while version in _UPGRADES:
        for statement in _UPGRADES[version]:
            yield _sql(statement)
        version += 1
        yield _sql("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(version),))
    if version != SCHEMA_VERSION:
        raise StoreCorrupt(
            f"{location} holds an arkhon-rheo store of schema version {version}; this version "
            f"reads version {SCHEMA_VERSION} only. It was left untouched: open it with the "
            "matching arkhon-rheo version",
            location=location,
        )
    rows = yield _sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
    )
    if missing := _TABLES - {row[0] for row in rows}:
        raise StoreCorrupt(
            f"{location} lacks the tables {', '.join(sorted(missing))}; it is damaged and was "
            "left untouched",
            location=location,
        )


def prepare(schema: str, location: str) -> Script[None]:
    """Create, upgrade or check the store's schema, in one transaction under an advisory lock.

    Raises:
        StoreCorrupt: The schema holds another application's tables, a store of
            another version, or a damaged one.
        StoreError: PostgreSQL failed otherwise.
    """
    yield _sql("BEGIN")
    try:
        yield _sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"arkhon_rheo:{schema}",))
        yield _sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        found = yield _sql("SELECT to_regclass(%s)", (f'"{schema}".meta',))
        yield _sql(f'SET LOCAL search_path TO "{schema}"')
        if found[0][0] is None:
            yield from _create(schema, location)
        yield from _verify(schema, location)
        yield _sql("COMMIT")
    except GeneratorExit:
        raise
    except BaseException:
        yield _sql("ROLLBACK")
        raise
