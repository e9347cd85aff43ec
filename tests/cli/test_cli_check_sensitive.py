"""``arkhon-rheo check`` on a machine with sensitive fields: the key from ARKHON_RHEO_KEY.

The store is made by running version 1 of the safe machine
(`tests.support.sealed_versions`) with a keyring: a session paused at its gate
and one left running mid-stage, their secrets sealed. ``check`` opens them
with the key in ``ARKHON_RHEO_KEY``, as the other commands do, and prints no
secret; a key missing or wrong exits 2 naming the key, a session no upgrade
covers fails it (exit 1).
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.cli import main
from arkhon_rheo.store import SQLiteStore
from tests.support import sealed_versions as S

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring

if TYPE_CHECKING:
    from pathlib import Path

MODULE = "tests.support.sealed_versions"
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])


def run(*argv: str) -> tuple[int, str, str]:
    """``main(argv)`` with its stdout and stderr captured; no secret in either."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    for text in (out.getvalue(), err.getvalue()):
        for secret in S.SECRETS:
            assert secret not in text, f"{secret!r} printed by check"
    return code, out.getvalue(), err.getvalue()


async def _version_1(path: Path, key: str) -> None:
    try:
        async with AgentSystem(path=path, secrets=Keyring(key)) as system:
            await S.store_version_1(system)
    finally:
        S.HOLD["event"] = S.HOLD["inside"] = None
    async with SQLiteStore(path) as store:
        await store.set_status("running", "running")  # as a process killed mid-stage leaves it


@pytest.fixture
def key() -> str:
    return Keyring.generate()


@pytest.fixture
def old_store(tmp_path: Path, key: str) -> str:
    path = tmp_path / "v1.db"
    anyio.run(_version_1, path, key)
    return str(path)


@BACKENDS
def test_check_opens_sealed_sessions_with_the_key_from_the_environment(
    old_store: str, key: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARKHON_RHEO_KEY", key)
    argv = ("check", "-m", f"{MODULE}:v2", "--store", old_store, "--backend", backend)
    code, out, err = run(*argv)
    assert (code, err) == (0, ""), out
    assert "all 2 session(s) load and verify" in out
    code, out, _ = run(*argv, "--json")
    assert code == 0
    sessions = {row["session_id"]: row for row in json.loads(out)["sessions"]}
    assert set(sessions) == {"paused", "running"}
    for row in sessions.values():
        assert (row["ok"], row["reading"]) == (True, "upgraded from version 1")
        assert row["checked"] == row["events"] > 0
    code, out, err = run("check", "-m", f"{MODULE}:v2_undeclared", "--store", old_store)
    assert code == 1, (out, err)
    assert "field 'secret' is gone from SafeV2" in out


@BACKENDS
def test_check_without_the_key_or_with_another_exits_2_naming_it(
    old_store: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ARKHON_RHEO_KEY", raising=False)
    argv = ("check", "-m", f"{MODULE}:v2", "--store", old_store, "--backend", backend)
    code, out, err = run(*argv)
    assert code == 2, (out, err)
    assert "sealed under key" in err
    monkeypatch.setenv("ARKHON_RHEO_KEY", Keyring.generate())
    code, out, err = run(*argv)
    assert code == 2, (out, err)
    assert "which the keyring does not hold" in err
