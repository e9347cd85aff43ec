"""The inspector's ASGI app through httpx, on both backends: views, tokens, decisions, replay."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from arkhon_rheo import ConfigurationError
from arkhon_rheo.store import SQLiteStore

pytest.importorskip("starlette", reason="the inspector extra is not installed")
pytest.importorskip("hypercorn", reason="the inspector extra is not installed")

from arkhon_rheo.inspector import create_app, serve
from tests.inspector_fixture import desk, populate

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from starlette.applications import Starlette

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token"


@pytest.fixture
async def ids(tmp_path: Path) -> dict[str, str]:
    return await populate(str(tmp_path / "store.db"))


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


async def _client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        yield client


@pytest.fixture
def app(ids: dict[str, str], store_path: Path) -> Starlette:
    return create_app(store_path, machines=[desk], token=TOKEN)


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(app):
        yield client


@pytest.fixture
async def bare(ids: dict[str, str], store_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The app without any machine: the views that need the store only."""
    async for client in _client(create_app(store_path, token=TOKEN)):
        yield client


async def _stored(path: Path, session_id: str) -> tuple[Any, ...]:
    async with SQLiteStore(path) as store:
        return (await store.record(session_id), await store.history(session_id))


async def test_the_session_list_shows_every_session_and_filters_by_status(
    client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    for session_id in ids.values():
        assert f'href="/sessions/{session_id}"' in page.text
    assert "paused: 1" in page.text
    assert "failed: 1" in page.text
    paused = await client.get("/?status=paused")
    assert ids["paused"] in paused.text
    assert ids["failed"] not in paused.text
    feed = (await client.get("/api/sessions")).json()["sessions"]
    assert {row["session_id"]: row["status"] for row in feed} == {
        ids["paused"]: "paused",
        ids["finished"]: "finished",
        ids["failed"]: "failed",
    }
    one = (await client.get(f"/api/sessions/{ids['finished']}")).json()
    assert one["steps"] == 6
    assert (await client.get("/api/sessions/nope")).status_code == 404


async def test_a_session_page_shows_steps_diffs_calls_failures_and_the_path(
    client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    page = (await client.get(f"/sessions/{ids['finished']}")).text
    # Each event, its move, and the recorded model and tool calls.
    for seq in range(1, 7):
        assert f'id="event-{seq}"' in page
    assert "INITIALIZED → ACTING" in page
    assert "tool:lookup" in page
    assert "look up &lt;flaky printer&gt;" in page  # escaped, as every stored value
    # The recoverable failure, its class, and the restart it led to.
    assert "lookup service hiccup" in page
    assert "class-recoverable" in page
    assert "1 restart" in page
    # A state diff: the field, its value before and after.
    assert '<th>answer</th><td class="before">&#34;&#34;</td>' in page
    # The machine's graph, the moves taken drawn and counted.
    assert 'data-move="OBSERVING->FINISHED"' in page
    assert 'class="move taken" data-move="INITIALIZED->ACTING"' in page
    assert "INITIALIZED --&gt; ACTING : 1x" in page
    failed = (await client.get(f"/sessions/{ids['failed']}")).text
    assert "class-fatal" in failed
    assert "(ended: failed)" in failed
    missing = await client.get("/sessions/nope")
    assert missing.status_code == 404
    assert "nope" in missing.text


async def test_without_the_machine_the_store_views_still_work(
    bare: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    assert (await bare.get("/")).status_code == 200
    page = await bare.get(f"/sessions/{ids['finished']}")
    assert page.status_code == 200
    assert "no machine named &#39;desk&#39; was given" in page.text
    assert "folded from the stored patches" in page.text
    assert 'class="move taken" data-move="ACTING->OBSERVING"' in page.text
    assert '<th>answer</th><td class="before">&#34;&#34;</td>' in page.text
    before = await _stored(store_path, ids["paused"])
    refused = await bare.post(
        f"/sessions/{ids['paused']}/decide", data={"token": TOKEN, "decision": "abort"}
    )
    assert refused.status_code == 409
    assert await _stored(store_path, ids["paused"]) == before


async def test_changes_need_the_token(
    client: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    url = f"/sessions/{ids['paused']}/decide"
    before = await _stored(store_path, ids["paused"])
    for data, headers in [
        ({"decision": "abort"}, {}),
        ({"decision": "abort", "token": "wrong"}, {}),
        ({"decision": "abort"}, {"X-Arkhon-Token": "wrong"}),
    ]:
        answer = await client.post(url, data=data, headers=headers)
        assert answer.status_code == 403
        assert "token" in answer.text
    re_run = await client.post(f"/sessions/{ids['finished']}/replay", data={"reexecute": "1"})
    assert re_run.status_code == 403
    assert await _stored(store_path, ids["paused"]) == before
    # The right token in the header is enough.
    done = await client.post(url, data={"decision": "abort"}, headers={"X-Arkhon-Token": TOKEN})
    assert done.status_code == 303
    record, _ = await _stored(store_path, ids["paused"])
    assert record.status == "aborted"


async def test_a_browser_keeps_the_token_in_a_cookie_and_its_forms_carry_it(
    client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    page = await client.get(f"/sessions/{ids['paused']}")
    assert 'name="token" type="password"' in page.text  # no token: the form asks for it
    wrong = await client.get("/?token=wrong")
    assert wrong.status_code == 403
    taken = await client.get(f"/?token={TOKEN}")
    assert taken.status_code == 303
    assert taken.headers["location"] == "/"
    assert "samesite=strict" in taken.headers["set-cookie"].lower()
    assert "httponly" in taken.headers["set-cookie"].lower()
    page = await client.get(f"/sessions/{ids['paused']}")
    assert f'<input type="hidden" name="token" value="{TOKEN}">' in page.text


async def test_an_edit_refused_by_validation_is_shown_and_changes_nothing(
    client: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    url = f"/sessions/{ids['paused']}/decide"
    before = await _stored(store_path, ids["paused"])
    cases = [
        ({"field.priority": '"urgent"'}, "InvalidPatch"),  # not an int
        ({"field.question": '""'}, "InvariantViolation"),  # every state needs a question
        ({"field.priority": "{not json"}, "is not JSON"),
        ({"field.priority": "1"}, "the edit changes nothing"),
    ]
    for fields, expected in cases:
        answer = await client.post(url, data={"token": TOKEN, "decision": "edit", **fields})
        assert answer.status_code == 422, fields
        assert 'id="error"' in answer.text
        assert expected in answer.text
        # The form keeps what was typed, so it can be corrected.
        typed = next(iter(fields.values()))
        assert json.dumps(typed)[1:-1].replace('"', "&#34;").replace("\\", "") in answer.text
        assert await _stored(store_path, ids["paused"]) == before
    bad_resume = await client.post(
        url, data={"token": TOKEN, "decision": "resume", "value": '"maybe"'}
    )
    assert bad_resume.status_code == 422
    assert "InvalidPatch" in bad_resume.text
    unknown = await client.post(url, data={"token": TOKEN, "decision": "ship"})
    assert unknown.status_code == 422
    assert await _stored(store_path, ids["paused"]) == before
    not_paused = await client.post(
        f"/sessions/{ids['finished']}/decide", data={"token": TOKEN, "decision": "abort"}
    )
    assert not_paused.status_code == 422
    assert "SessionError" in not_paused.text


async def test_a_valid_edit_is_stored_and_the_session_stays_paused(
    client: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    url = f"/sessions/{ids['paused']}/decide"
    answer = await client.post(
        url, data={"token": TOKEN, "decision": "edit", "field.priority": "3", "field.plan": '"x"'}
    )
    assert answer.status_code == 303
    record, history = await _stored(store_path, ids["paused"])
    assert record.status == "paused"
    assert history[-1].kind == "decision"
    assert history[-1].patch == {"set": {"plan": "x", "priority": 3}}
    page = (await client.get(answer.headers["location"])).text
    assert "Decision stored: edit" in page


async def test_a_valid_resume_runs_the_session_to_its_end(
    app: Starlette, client: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    answer = await client.post(
        f"/sessions/{ids['paused']}/decide",
        data={"token": TOKEN, "decision": "resume", "value": "true"},
    )
    assert answer.status_code == 303
    system = app.state.inspector.system  # the session runs in the inspector's system
    result = await system.session(ids["paused"]).result()
    assert result.state.answer == "approved: found 17 results"
    record, history = await _stored(store_path, ids["paused"])
    assert record.status == "finished"
    assert [event.kind for event in history][-2:] == ["decision", "step"]


async def test_replay_verification_highlights_the_first_divergence(
    client: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    ok = await client.get(f"/sessions/{ids['finished']}/replay")
    assert ok.status_code == 200
    assert "The log replays to the committed states: 6 events folded" in ok.text
    assert "divergent" not in ok.text
    again = await client.post(
        f"/sessions/{ids['finished']}/replay", data={"token": TOKEN, "reexecute": "1"}
    )
    assert "stages re-executed against their recorded calls" in again.text
    # Damage event 3's patch in the file: the replay must point at it.
    with sqlite3.connect(store_path) as db:
        db.execute(
            "UPDATE events SET patch = ? "
            "WHERE session = (SELECT n FROM sessions WHERE id = ?) AND seq = 3",
            (json.dumps({"set": {"notes": ["forged"]}}), ids["finished"]),
        )
    bad = await client.get(f"/sessions/{ids['finished']}/replay")
    assert 'First divergence at <a href="#event-3">event 3</a>' in bad.text
    assert '<tr id="event-3" class="kind-step divergent">' in bad.text
    assert "Replay diverges here" in bad.text


async def test_replay_and_decide_need_the_machine_that_fits(
    bare: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    answer = await bare.get(f"/sessions/{ids['finished']}/replay")
    assert answer.status_code == 409
    assert "replay needs the machine" in answer.text


async def test_static_files_are_served_from_the_package(client: httpx.AsyncClient) -> None:
    css = await client.get("/static/inspector.css")
    js = await client.get("/static/inspector.js")
    assert css.status_code == js.status_code == 200
    assert "svg.graph" in css.text
    assert "fetch(" in js.text
    page = (await client.get("/")).text
    # Offline: nothing is fetched from another origin.
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page


async def test_only_loopback_host_names_are_answered(client: httpx.AsyncClient) -> None:
    rebound = await client.get("/", headers={"Host": "evil.example"})
    assert rebound.status_code == 400
    assert (await client.get("/", headers={"Host": "localhost:8765"})).status_code == 200


async def test_a_protected_app_needs_the_token_for_every_page(
    ids: dict[str, str], store_path: Path
) -> None:
    app = create_app(store_path, token=TOKEN, protect_reads=True, allowed_hosts=["*"])
    async for client in _client(app):
        assert (await client.get("/")).status_code == 403
        assert (await client.get(f"/sessions/{ids['paused']}")).status_code == 403
        assert (await client.get("/api/sessions")).status_code == 403
        assert (await client.get("/api/sessions", headers={"X-Arkhon-Token": TOKEN})).is_success
        taken = await client.get(f"/sessions/{ids['paused']}?token={TOKEN}")
        assert taken.status_code == 303
        assert (await client.get(f"/sessions/{ids['paused']}")).status_code == 200


async def test_bad_arguments_are_refused_with_clear_errors(
    ids: dict[str, str], store_path: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="no store file"):
        create_app(tmp_path / "missing.db")
    with pytest.raises(ConfigurationError, match="not a Machine"):
        create_app(store_path, machines={"desk": "desk"})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="token must be"):
        create_app(store_path, token="")
    with pytest.raises(ConfigurationError, match="allow_remote=True"):
        await serve(store_path, host="0.0.0.0", port=0)
    with pytest.raises(ConfigurationError, match="needs a token of your own"):
        await serve(store_path, host="0.0.0.0", port=0, allow_remote=True)
    with pytest.raises(ConfigurationError, match="port must be"):
        await serve(store_path, port=70000)


async def test_serve_answers_over_http_on_this_backend(
    ids: dict[str, str], store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with anyio.create_task_group() as tg:
        url = await tg.start(
            lambda task_status: serve(store_path, port=0, machines=[desk], task_status=task_status)
        )
        assert url.startswith("http://127.0.0.1:")
        base, token = url.split("/?token=")
        async with httpx.AsyncClient(base_url=base) as http:
            listing = await http.get("/api/sessions")
            assert {row["session_id"] for row in listing.json()["sessions"]} == set(ids.values())
            refused = await http.post(
                f"/sessions/{ids['paused']}/decide", data={"decision": "abort"}
            )
            assert refused.status_code == 403
            done = await http.post(
                f"/sessions/{ids['paused']}/decide",
                data={"decision": "abort"},
                headers={"X-Arkhon-Token": token},
            )
            assert done.status_code == 303
        tg.cancel_scope.cancel()
    assert f"open {url}" in capsys.readouterr().out
    record, _ = await _stored(store_path, ids["paused"])
    assert record.status == "aborted"


def test_without_the_extra_the_error_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, store_path: Path
) -> None:
    import importlib

    real = importlib.import_module

    def missing_hypercorn(name: str, package: str | None = None) -> Any:
        if name == "hypercorn":
            raise ImportError(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", missing_hypercorn)
    with pytest.raises(ConfigurationError, match=r"arkhon-rheo\[inspector\]"):
        create_app(store_path)


def test_the_module_entry_refuses_bad_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from arkhon_rheo.inspector.__main__ import main
    from arkhon_rheo.protocols._spec import load_machine

    assert load_machine("tests.inspector_fixture:desk") is desk
    for spec, expected in [
        ("nocolon", "'module:attr'"),
        ("no_such_module_xyz:m", "cannot import"),
        ("tests.inspector_fixture:nothing", "has no attribute"),
        ("tests.inspector_fixture:TOKEN_IS_NOT_HERE", "has no attribute"),
        ("tests.inspector_fixture:Reply", "must name a Machine"),
    ]:
        with pytest.raises(ConfigurationError, match=expected):
            load_machine(spec)
    assert (
        main(["--store", str(tmp_path / "missing.db"), "--port", "0"]) == 3
    )  # not found, as the command line says
    assert "no store file" in capsys.readouterr().err
    assert main(["--machine", "nocolon"]) == 2
