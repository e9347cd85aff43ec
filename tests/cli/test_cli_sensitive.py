"""The command line and sensitive fields: the key from ARKHON_RHEO_KEY, no value in any output."""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo.cli import main
from tests.support.sensitive import FAILURES, SECRETS, TOKEN

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

MACHINE = "tests.support.sensitive:vault"
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FAILURES.clear()
    yield
    FAILURES.clear()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = Keyring.generate()
    monkeypatch.setenv("ARKHON_RHEO_KEY", key)
    return key


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    for text in (out.getvalue(), err.getvalue()):
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} printed by {argv[0]}"
    return code, out.getvalue(), err.getvalue()


def run_json(*argv: str) -> Any:
    code, out, err = run(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _paused(store: Path, backend: str) -> dict[str, Any]:
    started: dict[str, Any] = run_json(
        "run", MACHINE, "--input", json.dumps({"token": TOKEN}), "--session-id", "v1",
        "--store", str(store), "--backend", backend,
    )  # fmt: skip
    return started


@BACKENDS
@pytest.mark.usefixtures("key")
def test_no_command_prints_a_sensitive_value(tmp_path: Path, backend: str) -> None:
    store = tmp_path / "vault.db"
    started = _paused(store, backend)
    assert started["exit_reason"] == "paused"
    assert started["state"]["token"] == "[SENSITIVE]"
    assert started["state"]["notes"] == "[SENSITIVE]"
    assert started["state"]["user"] == "ann"
    listed = run_json("sessions", "--store", str(store))
    assert "[REDACTED]" in json.dumps(listed[0]["waiting"])  # the gate's question
    shown = run_json("show", "v1", "--store", str(store))
    assert "[SENSITIVE]" in json.dumps(shown["events"])
    for argv in (("sessions",), ("show", "v1")):
        code, out, _ = run(*argv, "--store", str(store))
        assert code == 0
        assert "v1" in out
    report = run_json("replay", "v1", "--machine", MACHINE, "--reexecute", "--store", str(store))
    assert report["ok"] is True
    forked = run_json("fork", "v1", "--at", "2", "--machine", MACHINE, "--store", str(store))
    assert forked["parent"] == "v1"
    code, out, _ = run("decide", "v1", "approve", "--machine", MACHINE, "--store", str(store))
    assert code == 0
    assert "finished" in out
    resumed = run_json("resume", forked["session_id"], "--machine", MACHINE, "--store", str(store))
    assert resumed["exit_reason"] == "paused"
    assert resumed["state"]["token"] == "[SENSITIVE]"


def test_without_the_key_a_command_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    store = tmp_path / "vault.db"
    _paused(store, "asyncio")
    monkeypatch.delenv("ARKHON_RHEO_KEY")
    code, _, err = run("replay", "v1", "--machine", MACHINE, "--store", str(store))
    assert code == 2
    assert f"sealed under key {Keyring(key).key_id}" in err
    assert "no keyring was given" in err
    monkeypatch.setenv("ARKHON_RHEO_KEY", Keyring.generate())
    code, _, err = run("decide", "v1", "approve", "--machine", MACHINE, "--store", str(store))
    assert code == 2
    assert "which the keyring does not hold" in err
    code, _, err = run("run", MACHINE, "--store", str(tmp_path / "other.db"))
    assert code == 0  # a key in the environment: the session is stored sealed with it
    monkeypatch.delenv("ARKHON_RHEO_KEY")
    code, _, err = run("run", MACHINE, "--store", str(tmp_path / "none.db"), "--session-id", "n")
    assert code == 2
    assert "pass AgentSystem(secrets=Keyring(key))" in err
    listed = run_json("sessions", "--store", str(tmp_path / "none.db"))
    assert listed == []  # nothing was stored
    code, _, err = run("show", "v1", "--store", str(store))  # needs no key
    assert code == 0
