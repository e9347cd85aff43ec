from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import structlog
import trio.testing

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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


@pytest.fixture
def postgres_url(postgres_server: Any) -> str:
    """The URL of a fresh, empty database on the test run's PostgreSQL server."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url: str = postgres_server.database_url(name)
    return url
