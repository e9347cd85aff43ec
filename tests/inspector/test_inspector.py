"""The inspector's ASGI app through httpx, on both backends: views, tokens, decisions, replay."""

from __future__ import annotations

import contextlib
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
from tests.support.inspector_fixture import desk, populate

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


@contextlib.asynccontextmanager
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
    async with _client(app) as client:
        yield client


@pytest.fixture
async def bare(ids: dict[str, str], store_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The app without any machine: the views that need the store only."""
    async with _client(create_app(store_path, token=TOKEN)) as client:
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
    assert "INITIALIZED --&gt; ACTING: think x1" in page  # the one Mermaid of StateGraph
    assert "ACTING --&gt; ACTING: act x1" in page  # the recoverable failure, retried in place
    assert 'data-state="ACTING"><rect' in page
    assert "ACTING \u00d72" in page  # entered, then retried
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


async def test_a_paused_session_page_says_what_it_waits_for(
    client: httpx.AsyncClient, bare: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    url = f"/sessions/{ids['paused']}"
    page = (await client.get(url)).text
    assert 'id="waits-for"' in page
    assert "Waits for a decision at gate <q>before review</q>" in page
    assert '<dd id="waits-stage"><code>review</code>' in page
    assert (
        '<dd id="waits-field">field <code>approved</code> of type <code>bool | None</code></dd>'
        in page
    )
    assert "approved (bool | None, JSON)" in page  # the approve form's value says it too
    # Without the machine: the gate and its stage, and where the field would come from.
    without = (await bare.get(url)).text
    assert "Waits for a decision at gate <q>before review</q>" in without
    # The session's record names the field; only the machine knows its type.
    assert '<dd id="waits-field">field <code>approved</code></dd>' in without
    # An edit is the last event now; the session still waits at the gate of its pause.
    edit = {"token": TOKEN, "decision": "edit", "field.priority": "2"}
    assert (await client.post(f"{url}/decide", data=edit)).status_code == 303
    assert "Waits for a decision at gate <q>before review</q>" in (await client.get(url)).text
    finished = (await client.get(f"/sessions/{ids['finished']}")).text
    assert 'id="waits-for"' not in finished


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
    ok = await client.post(f"/sessions/{ids['finished']}/replay", data={"token": TOKEN})
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
    bad = await client.post(
        f"/sessions/{ids['finished']}/replay", headers={"X-Arkhon-Token": TOKEN}
    )
    link = f'<a href="/sessions/{ids["finished"]}?page=1#event-3">event 3</a>'
    assert f"First divergence at {link}" in bad.text
    assert '<tr id="event-3" class="kind-step divergent">' in bad.text
    assert "Replay diverges here" in bad.text


async def test_replay_and_decide_need_the_machine_that_fits(
    bare: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    answer = await bare.post(f"/sessions/{ids['finished']}/replay", data={"token": TOKEN})
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
    async with _client(app) as client:
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
    from arkhon_rheo._load import as_configuration, load_target
    from arkhon_rheo.inspector.__main__ import main
    from arkhon_rheo.protocols import Machine

    assert load_target("tests.support.inspector_fixture:desk", Machine) is desk
    for spec, expected in [
        ("nocolon", "expected MODULE:ATTR"),
        ("no_such_module_xyz:m", "no module"),
        ("tests.support.inspector_fixture:nothing", "has no attribute"),
        ("tests.support.inspector_fixture:TOKEN_IS_NOT_HERE", "has no attribute"),
        ("tests.support.inspector_fixture:Reply", "not a Machine"),
    ]:
        with pytest.raises(ConfigurationError, match=expected):
            load_target(spec, Machine, errors=as_configuration)
    assert (
        main(["--store", str(tmp_path / "missing.db"), "--port", "0"]) == 3
    )  # not found, as the command line says
    assert "no store file" in capsys.readouterr().err
    assert main(["--machine", "nocolon"]) == 2


# -- JSON Python cannot decode (issue 28, item 6) -------------------------------------


def test_the_json_helper_turns_what_python_cannot_decode_into_a_typed_error() -> None:
    from arkhon_rheo.inspector._json import InvalidJson, parse_json

    assert parse_json("a value", '{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    for text, expected in [
        ("[" * 100_000, "levels deep"),
        ("[" * 100_000 + "]" * 100_000, "levels deep"),
        ("1" * 5000, "digits"),
        ("{not json", "is not JSON"),
    ]:
        with pytest.raises(InvalidJson, match=expected) as caught:
            parse_json("a value", text)
        assert isinstance(caught.value, ConfigurationError)
        assert "a value" in str(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__suppress_context__


async def test_json_python_cannot_decode_is_refused_on_the_page(
    client: httpx.AsyncClient, ids: dict[str, str], store_path: Path
) -> None:
    url = f"/sessions/{ids['paused']}/decide"
    before = await _stored(store_path, ids["paused"])
    deep, huge = "[" * 100_000, "9" * 5000
    for fields, expected in [
        ({"decision": "edit", "field.priority": deep}, "levels deep"),
        ({"decision": "edit", "field.notes": f"[{deep}]"}, "levels deep"),
        ({"decision": "edit", "field.priority": huge}, "digits"),
        ({"decision": "resume", "value": deep}, "levels deep"),
        ({"decision": "resume", "value": huge}, "digits"),
    ]:
        answer = await client.post(url, data={"token": TOKEN, **fields})
        assert answer.status_code == 422, fields
        assert 'id="error"' in answer.text
        assert expected in answer.text
        assert await _stored(store_path, ids["paused"]) == before


# -- session ids of every kind in URLs (issue 28, item 7) ------------------------------

#: Ids a store may hold: a subgraph child's, and ones URLs give a meaning to.
ODD_IDS = ["a/b/1", "what?x=1", "tag#2", "%41", "A", "with space", "ünï/cödé ☃", "x/decide"]


def _href(session_id: str) -> str:
    from urllib.parse import quote

    return "/sessions/" + quote(session_id, safe="")


async def test_every_kind_of_session_id_round_trips_through_the_links(
    store_path: Path,
) -> None:
    from html import escape

    from tests.support.inspector_fixture import populate_ids

    await populate_ids(str(store_path), ODD_IDS)
    async with _client(create_app(store_path, machines=[desk], token=TOKEN)) as client:
        listing = (await client.get("/")).text
        for session_id in ODD_IDS:
            href = _href(session_id)
            assert f'href="{escape(href)}"' in listing, session_id
            page = await client.get(href)
            assert page.status_code == 200, session_id
            assert f"<code>{escape(session_id)}</code>" in page.text
            # The page's own links: the JSON feed it polls and its forms.
            assert f'data-poll="/api{escape(href)}"' in page.text
            assert f'action="{escape(href)}/decide"' in page.text
            feed = await client.get("/api" + href)
            assert feed.json()["session_id"] == session_id
            done = await client.post(
                href + "/decide",
                data={"token": TOKEN, "decision": "edit", "field.priority": "5"},
            )
            assert done.status_code == 303, (session_id, done.text)
            assert done.headers["location"] == href + "?done=edit"
            assert "Decision stored: edit" in (await client.get(done.headers["location"])).text
        for session_id in ODD_IDS:  # each decision reached its own session, none another
            _, history = await _stored(store_path, session_id)
            assert [event.kind for event in history].count("decision") == 1, session_id
    # A protected app keeps the token and sends the browser back to the same id.
    app = create_app(store_path, token=TOKEN, protect_reads=True, allowed_hosts=["*"])
    async with _client(app) as client:
        taken = await client.get(_href("%41") + f"?token={TOKEN}")
        assert taken.status_code == 303
        assert taken.headers["location"] == _href("%41")
        again = await client.get(taken.headers["location"])
        assert "<code>%41</code>" in again.text


# -- costly actions are POSTs with the token; long sessions are paged (item 8) -----


async def test_replay_runs_only_on_a_post_with_the_token(
    client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    url = f"/sessions/{ids['finished']}/replay"
    plain = await client.get(url)  # what any web page can make a browser do
    assert plain.status_code in (404, 405)
    assert 'id="replay"' not in plain.text
    for headers in ({}, {"X-Arkhon-Token": "wrong"}):
        refused = await client.post(url, headers=headers)
        assert refused.status_code == 403
        assert 'id="replay"' not in refused.text
    done = await client.post(url, data={"token": TOKEN})
    assert done.status_code == 200
    assert "The log replays to the committed states: 6 events folded" in done.text
    # The page offers the verification as a form that posts, not as a link.
    page = (await client.get(f"/sessions/{ids['finished']}")).text
    assert f'href="{url}"' not in page
    assert f'<form method="post" action="{url}" class="inline" id="verify-form">' in page


async def test_a_long_session_is_shown_a_page_of_events_at_a_time(
    store_path: Path,
) -> None:
    import re

    from arkhon_rheo.inspector._app import PAGE_SIZE
    from tests.support.inspector_fixture import populate_long, tally

    total = PAGE_SIZE * 2 + PAGE_SIZE // 2
    session_id = await populate_long(str(store_path), total)
    href = _href(session_id)

    def shown(text: str) -> list[int]:
        return [int(seq) for seq in re.findall(r'<tr id="event-(\d+)"', text)]

    async with _client(create_app(store_path, machines=[tally], token=TOKEN)) as client:
        last = await client.get(href)  # the newest events first come into view
        assert last.status_code == 200
        assert shown(last.text) == list(range(PAGE_SIZE * 2 + 1, total + 1))
        assert f'href="{href}?page=1" id="first-page"' in last.text
        assert f'href="{href}?page=2" id="previous-page"' in last.text
        assert 'id="next-page"' not in last.text
        first = await client.get(href + "?page=1")
        assert shown(first.text) == list(range(1, PAGE_SIZE + 1))
        assert f'href="{href}?page=2" id="next-page"' in first.text
        assert f'href="{href}?page=3" id="last-page"' in first.text
        assert 'id="previous-page"' not in first.text
        middle = await client.get(href + "?page=2")
        assert shown(middle.text) == list(range(PAGE_SIZE + 1, PAGE_SIZE * 2 + 1))
        for page in (first, middle, last):
            assert len(shown(page.text)) <= PAGE_SIZE
            assert len(page.content) < 400_000
        for bad in ("0", "4", "x", "-1"):
            refused = await client.get(href + f"?page={bad}")
            assert refused.status_code in (400, 404), bad
            assert "page" in refused.text
        # A replay's divergence links to the page that shows the event.
        with sqlite3.connect(store_path) as db:
            db.execute(
                "UPDATE events SET patch = ? "
                "WHERE session = (SELECT n FROM sessions WHERE id = ?) AND seq = 7",
                (json.dumps({"append": {"marks": [99]}}), session_id),
            )
        replayed = await client.post(href + "/replay", data={"token": TOKEN})
        assert f'<a href="{href}?page=1#event-7">event 7</a>' in replayed.text
        assert 'class="kind-step divergent"' in replayed.text  # the page holding it


def test_the_list_script_finds_rows_without_building_selectors_from_ids() -> None:
    import re
    from pathlib import Path

    import arkhon_rheo.inspector

    script = Path(arkhon_rheo.inspector.__file__).parent / "static" / "inspector.js"
    text = script.read_text(encoding="utf-8")
    selectors = re.findall(r"querySelector(?:All)?\(([^)]*)\)", text)
    assert selectors
    for selector in selectors:  # every selector a constant: no id pasted into one
        assert re.fullmatch(r'\s*"[^"]*"\s*|\s*\'[^\']*\'\s*', selector), selector
    assert "dataset.session" in text  # rows are found by their data attribute


# -- the token is never on the command line (issue 28, item 8) ------------------------


def test_inspect_refuses_a_token_on_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from arkhon_rheo.cli import main

    for argv in (["--token", "T0PS3CRET"], ["--token=T0PS3CRET"]):
        status = main(["inspect", *argv, "--store", str(tmp_path / "missing.db"), "--port", "0"])
        assert status == 2
        err = capsys.readouterr().err
        assert "process list" in err
        assert "--token-file" in err
        assert "ARKHON_INSPECTOR_TOKEN" in err
        assert "T0PS3CRET" not in err


def test_inspect_refuses_a_token_file_it_cannot_use(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arkhon_rheo.cli import main

    missing_store = str(tmp_path / "missing.db")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    for path, expected in [(tmp_path / "nowhere", "cannot read"), (empty, "is empty")]:
        assert main(["inspect", "--token-file", str(path), "--store", missing_store]) == 2
        assert expected in capsys.readouterr().err
    # A usable file gets past the token (the missing store is what stops it), and
    # one that other users may read is used with a warning.
    shared = tmp_path / "shared"
    shared.write_text("from-a-file\n")
    shared.chmod(0o644)
    assert main(["inspect", "--token-file", str(shared), "--store", missing_store]) == 3
    err = capsys.readouterr().err
    assert "other users can read" in err
    assert "from-a-file" not in err
    monkeypatch.setenv("ARKHON_INSPECTOR_TOKEN", "from-the-environment")
    assert main(["inspect", "--store", missing_store]) == 3
    assert "other users" not in capsys.readouterr().err


@pytest.mark.parametrize("source", ["file", "environment"])
def test_inspect_serves_with_the_token_from_a_file_or_the_environment(
    tmp_path: Path, source: str
) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "store.db"
    ids = anyio.run(populate, str(path))
    secret = f"token-from-the-{source}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("ARKHON_INSPECTOR_TOKEN", None)
    argv = [sys.executable, "-m", "arkhon_rheo", "inspect", "--store", str(path), "--port", "0"]
    argv += ["--machine", "tests.support.inspector_fixture:desk"]
    if source == "file":
        token_file = tmp_path / "token"
        token_file.write_text(secret + "\n")
        token_file.chmod(0o600)
        argv += ["--token-file", str(token_file)]
    else:
        env["ARKHON_INSPECTOR_TOKEN"] = secret
    server = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "open http" in line, line
        base, token = line.split("open ", 1)[1].strip().split("/?token=")
        assert token == secret
        with httpx.Client(base_url=base) as http:
            url = f"/sessions/{ids['paused']}/decide"
            wrong = http.post(url, data={"decision": "abort"}, headers={"X-Arkhon-Token": "x"})
            assert wrong.status_code == 403
            done = http.post(url, data={"decision": "abort"}, headers={"X-Arkhon-Token": secret})
            assert done.status_code == 303
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
