"""What the command line and the inspector show of a parent parked on its waiting child."""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.cli import main
from tests.graphs.test_subgraph_waits import CHILD, Main, Runs, machines

pytest.importorskip("starlette", reason="the inspector extra is not installed")

from arkhon_rheo.inspector import create_app

if TYPE_CHECKING:
    from pathlib import Path


#: The pair, for the command line to load (``-m tests.graphs.test_subgraph_waits_views:AUTH``).
PARENT, AUTH = machines(Runs(), waits="gate")


def parked_pair(db: Path) -> None:
    """Store a parent parked on its child, paused at a gate."""

    async def run() -> None:
        async with AgentSystem(path=db) as system:
            await system.run(PARENT, Main(user="alice"), session_id="m1")

    anyio.run(run)


def cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code == 0, err.getvalue()
    return out.getvalue()


def show(*argv: str) -> Any:
    return cli("show", *argv)


def test_decide_approves_the_child_by_its_id_and_its_parent_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    parked_pair(db)
    machine = f"{__name__}:AUTH"
    decided = json.loads(
        cli(
            "decide",
            CHILD,
            "approve",
            "--value",
            "true",
            "-m",
            machine,
            "--store",
            str(db),
            "--json",
        )
    )
    assert decided["exit_reason"] == "finished"

    async def go_on() -> Any:
        async with AgentSystem(path=db) as system:
            record = await system.stored(PARENT, "m1").record()
            (woken,) = await system.recover(PARENT)  # a system serving the parent's machine
            return record, await woken.result()

    record, result = anyio.run(go_on)
    assert record.status == "waiting"
    assert record.wake_at is not None  # due: the child's end was posted to its inbox
    assert result.ok
    assert result.state.token == "token-for-alice-True"


def test_show_says_the_parent_waits_on_its_child_and_the_child_names_its_parent(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    parked_pair(db)
    data = json.loads(show("m1", "--store", str(db), "--json"))
    assert data["waits_for"]["kind"] == "child"
    assert data["waits_for"]["child"] == CHILD
    assert data["waits_for"]["child_status"] == "paused"
    text = show("m1", "--store", str(db))
    assert f"waits for its child session {CHILD!r} to end (it was paused at a gate" in text
    assert "--machine" not in text
    child = show(CHILD, "--store", str(db))
    assert "child session of m1" in child
    assert "forked from" not in child


@pytest.mark.anyio
async def test_the_inspector_links_the_parent_to_its_child_and_back(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    await anyio.to_thread.run_sync(parked_pair, db)
    app = create_app(db, token="t0ken")
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        parent = (await client.get("/sessions/m1")).text
        child = (await client.get("/sessions/m1%2Fauthenticate%2F2")).text
    assert "Waits for its child session to end" in parent
    assert '<dd id="waits-child"><a href="/sessions/m1%2Fauthenticate%2F2">' in parent
    assert "paused at a gate" in parent
    assert 'child session of <a href="/sessions/m1" id="parent-link">m1</a>' in child
