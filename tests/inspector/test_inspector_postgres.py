"""The inspector on a PostgreSQL store: the same pages, the URL's password never shown."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from arkhon_rheo.inspector import create_app
from tests.inspector.test_inspector import TOKEN, _client
from tests.support.inspector_fixture import desk, populate

pytestmark = pytest.mark.anyio


async def test_the_inspector_reads_a_postgres_store(postgres_server: Any) -> None:
    secret = "insp-secret-pw-42"
    name = "inspector_pg"
    with psycopg.connect(postgres_server.url, autocommit=True) as connection:
        if not connection.execute("SELECT 1 FROM pg_roles WHERE rolname = 'insp'").fetchall():
            connection.execute(f"CREATE ROLE insp LOGIN SUPERUSER PASSWORD '{secret}'")
        connection.execute(f"DROP DATABASE IF EXISTS {name}")
        connection.execute(f"CREATE DATABASE {name} OWNER insp")
    url = f"postgresql://insp:{secret}@127.0.0.1:{postgres_server.port}/{name}"
    ids = await populate(url)
    async with _client(create_app(url, machines=[desk], token=TOKEN)) as client:
        page = await client.get("/")
        assert page.status_code == 200
        for session_id in ids.values():
            assert f'href="/sessions/{session_id}"' in page.text
        assert secret not in page.text
        one = await client.get(f"/sessions/{ids['finished']}")
        assert one.status_code == 200
        assert secret not in one.text
        # Paths across sessions, read the same way from PostgreSQL.
        paths = await client.get("/api/paths?machine=desk")
        assert paths.json()["sessions"] == {"finished": 1, "failed": 1, "stuck": 1, "running": 0}
        page = await client.get("/paths?machine=desk")
        assert page.status_code == 200
        assert secret not in page.text
