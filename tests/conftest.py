from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import pytest
import structlog
import trio.testing
from hypothesis import settings

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Property tests without a count of their own draw 50 examples in the default run;
# ``pytest --hypothesis-profile=thorough`` draws 200 (a profile named on the command
# line is loaded after this file).
settings.register_profile("default-run", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile("default-run")

#: The `anyio_backend` value of a test on trio's virtual clock (see `helpers.on_virtual_clock`).
VIRTUAL_CLOCK = "trio-autojump"


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    """Trio's virtual clock: time jumps ahead whenever every task is blocked."""
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Run every ``@pytest.mark.anyio`` test on both backends.

    A test parametrized with `VIRTUAL_CLOCK` runs once, on trio with the
    ``autojump_clock`` fixture's clock, through anyio's plugin like every other
    test, so each test runs once per backend, on the backend it names.
    """
    if request.param == VIRTUAL_CLOCK:
        return ("trio", {"clock": request.getfixturevalue("autojump_clock")})
    return str(request.param)


@pytest.fixture(autouse=True)
def _work_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AgentSystem() keeps sessions in ./arkhon-rheo.db: keep that out of the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """Leave structlog as each test found it.

    ``structlog.testing.capture_logs`` restores the processors but leaves
    structlog marked as configured, after which the library's events go
    through structlog's default printer to stdout, and a later test reading a
    command's stdout reads log lines too.
    """
    configured = structlog.is_configured()
    saved = structlog.get_config()
    yield
    if configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The cyclic GC off for the test, on again after it (garbage tests collect first)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One throwaway PostgreSQL server for the test run (skips if there are no binaries)."""
    from arkhon_rheo.testing import find_postgres, start_postgres

    pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")
    bindir = find_postgres()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL binaries (initdb, pg_ctl) found via pg_config, "
            "/usr/lib/postgresql/*/bin or PATH: install postgresql to run these tests"
        )
    server = start_postgres(bindir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _postgres_database(postgres_server: Any) -> str:
    """The URL of the one database of the test run's server that `postgres_url` empties."""
    import psycopg

    with psycopg.connect(postgres_server.url, autocommit=True) as connection:
        connection.execute('CREATE DATABASE "tests"')
    url: str = postgres_server.database_url("tests")
    return url


#: Every schema of a database but PostgreSQL's own.
_SCHEMAS = (
    "SELECT nspname FROM pg_namespace "
    "WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'"
)
#: Whether ``public`` holds anything (a new database's is empty).
_PUBLIC_USED = (
    "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = 'public'::regnamespace) "
    "OR EXISTS (SELECT 1 FROM pg_proc WHERE pronamespace = 'public'::regnamespace) "
    "OR EXISTS (SELECT 1 FROM pg_type WHERE typnamespace = 'public'::regnamespace)"
)


@pytest.fixture
def postgres_url(_postgres_database: str) -> str:
    """The URL of an empty database on the test run's PostgreSQL server.

    One database serves every test, emptied before each as a new one is:
    every other connection to it ended (their listeners and advisory locks
    with them), every schema dropped but ``public``, which is made again if
    anything was put there. (A new database per test cost a second each on a
    loaded machine, and its files at the end.)
    """
    import psycopg

    with psycopg.connect(_postgres_database, autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        for (schema,) in connection.execute(_SCHEMAS).fetchall():
            if schema != "public":
                connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
        row = connection.execute(_PUBLIC_USED).fetchone()
        if row is not None and row[0]:
            connection.execute("DROP SCHEMA public CASCADE")
            connection.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
            connection.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")
    return _postgres_database
