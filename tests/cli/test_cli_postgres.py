"""``--store postgresql://...``: the commands run on a PostgreSQL store, its password unshown."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.cli.test_cli import run, run_json


def test_demo_sessions_show_and_replay_on_postgres(postgres_server: Any) -> None:
    secret = "cli-secret-pw-123"
    with psycopg.connect(postgres_server.url, autocommit=True) as connection:
        if not connection.execute("SELECT 1 FROM pg_roles WHERE rolname = 'cli'").fetchall():
            connection.execute(f"CREATE ROLE cli LOGIN SUPERUSER PASSWORD '{secret}'")
        connection.execute("DROP DATABASE IF EXISTS cli_demo")
        connection.execute("CREATE DATABASE cli_demo OWNER cli")
    url = f"postgresql://cli:{secret}@127.0.0.1:{postgres_server.port}/cli_demo"
    code, out, err = run("demo", "--sessions", "3", "--seed", "1", "--store", url)
    assert code == 0, err
    assert secret not in out + err
    rows = run_json("sessions", "--store", url)
    assert len(rows) == 3
    sid = rows[0]["session_id"]
    code, out, err = run("show", sid, "--store", url)
    assert code == 0, err
    assert secret not in out + err
    code, out, err = run("sessions", "--store", url)
    assert code == 0
    assert secret not in out + err
    wrong = url.replace(secret, secret + "-wrong")
    code, out, err = run("sessions", "--store", wrong)
    assert code != 0
    assert secret not in out + err
    assert "password authentication failed" in out + err


@pytest.mark.parametrize("command", ["sessions", "show"])
def test_a_postgres_url_never_needs_a_file(command: str, postgres_url: str) -> None:
    argv = [command, "x"] if command == "show" else [command]
    code, out, err = run(*argv, "--store", postgres_url)
    assert "no store file" not in out + err
    assert code in (0, 3)  # an empty store: no session 'x'
