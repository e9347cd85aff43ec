"""The inspector's daily views (issue 29): diffs, outcomes, the list's pages, the favicon.

HTTP-level, through httpx on the app, on both backends.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from typing import TYPE_CHECKING, Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the inspector extra is not installed")
pytest.importorskip("hypercorn", reason="the inspector extra is not installed")

from arkhon_rheo.inspector import create_app
from arkhon_rheo.store import SQLiteStore
from tests.support.inspector_fixture import chat, desk, populate, populate_chat, populate_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from starlette.applications import Starlette

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token"


@contextlib.asynccontextmanager
async def _client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        yield client


# -- 1. each step shows what it changed, not the whole state -------------------------


def _renderings(page: str, turn: int) -> int:
    return page.count(f"message {turn:04d}:")


@pytest.mark.parametrize("with_machine", [True, False], ids=["machine", "bare"])
async def test_a_step_shows_only_the_items_appended_and_the_keys_changed(
    tmp_path: Path, with_machine: bool
) -> None:
    path = tmp_path / "store.db"
    short = await populate_chat(str(path), 20, session_id="short")
    long = await populate_chat(str(path), 40, session_id="long")
    machines = [chat] if with_machine else []
    async with _client(create_app(path, machines=machines, token=TOKEN)) as client:
        pages = {
            n: (await client.get(f"/sessions/{sid}")).text for n, sid in ((20, short), (40, long))
        }
    page = pages[40]
    # Each message is rendered a bounded number of times: appended in its step's diff,
    # in that step's patch, and once in the state now; never again in later steps.
    for turn in range(40):
        assert _renderings(page, turn) <= 3, (turn, _renderings(page, turn))
    total = {n: sum(_renderings(text, turn) for turn in range(n)) for n, text in pages.items()}
    assert total[40] <= 2 * total[20] + 6  # linear in the steps, not quadratic
    assert len(pages[40]) < 2.4 * len(pages[20])
    # A list field shows only the items appended; a mapping only the keys that changed.
    step = re.search(r'<tr id="event-5".*?</tr>\s*(?=<tr id="event-6")', page, re.S)
    assert step is not None
    shown = step.group()
    assert "message 0004:" in shown
    assert "message 0003:" not in shown
    assert 'class="appended"' in shown
    assert "<th>meta.turn</th>" in shown
    assert "<th>meta.seen1</th>" in shown
    assert "<th>meta.seen2</th>" not in shown  # unchanged keys are left out
    # The full state at a step is a link away.
    assert f'href="/sessions/{long}?at=5"' in shown


async def test_the_full_state_after_a_step_is_shown_on_demand(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    session_id = await populate_chat(str(path), 6)
    async with _client(create_app(path, machines=[chat], token=TOKEN)) as client:
        at = await client.get(f"/sessions/{session_id}?at=3")
        assert at.status_code == 200
        assert "state after event 3</h1>" in at.text
        for turn in range(3):
            assert _renderings(at.text, turn) == 1
        assert _renderings(at.text, 3) == 0
        assert f'href="/sessions/{session_id}?at=2"' in at.text  # the step before
        assert f'href="/sessions/{session_id}?at=4"' in at.text  # and after
        start = await client.get(f"/sessions/{session_id}?at=0")
        assert start.status_code == 200
        assert _renderings(start.text, 0) == 0
        for bad in ("7", "x", "-1"):
            refused = await client.get(f"/sessions/{session_id}?at={bad}")
            assert refused.status_code in (400, 404), bad
            assert "event" in refused.text


# -- 2. how a session ended is at the top of its page ---------------------------------


@pytest.fixture
async def ids(tmp_path: Path) -> dict[str, str]:
    return await populate(str(tmp_path / "store.db"))


@pytest.mark.parametrize("with_machine", [True, False], ids=["machine", "bare"])
async def test_the_outcome_and_the_failure_reason_come_first(
    tmp_path: Path, ids: dict[str, str], with_machine: bool
) -> None:
    machines = [desk] if with_machine else []
    async with _client(create_app(tmp_path / "store.db", machines=machines, token=TOKEN)) as c:
        failed = (await c.get(f"/sessions/{ids['failed']}")).text
        paused = (await c.get(f"/sessions/{ids['paused']}")).text
        finished = (await c.get(f"/sessions/{ids['finished']}")).text
    top = failed.index('id="outcome"')
    assert top < failed.index('id="graph"') < failed.index('id="timeline"')
    outcome = failed[top : failed.index("</section>", top)]
    assert '<b id="outcome-headline">Ended failed</b>' in outcome
    assert "Fatal (fatal): lookup refused &#39;fatal disk&#39;" in outcome
    assert "<code>act</code>" in outcome  # the stage it failed in
    assert f'at <a href="/sessions/{ids["failed"]}?page=1#event-2" id="outcome-event">' in outcome
    assert 'class="outcome outcome-failed"' in outcome
    top = paused.index('id="outcome"')
    assert top < paused.index('id="decide"')
    outcome = paused[top : paused.index("</section>", top)]
    assert "Paused at gate &#39;before review&#39;: waits for a human decision" in outcome
    assert 'href="#decide"' in outcome
    assert "#event-3" in outcome  # the pause
    # A recoverable failure the session went on from is not its outcome.
    assert "Finished in FINISHED after 6 events" in finished
    assert 'id="outcome-reason"' not in finished


# -- 3. the session list is paged ------------------------------------------------------


async def _many(path: Path, statuses: dict[str, int]) -> dict[str, str]:
    """Sessions recorded straight into a store: ``statuses`` says how many of each."""
    made: dict[str, str] = {}
    async with SQLiteStore(path) as store:
        for status, count in statuses.items():
            for n in range(count):
                session_id = f"{status}-{n:03d}"
                await store.create_session(
                    session_id, machine="desk", snapshot={"question": "q"}, status=status
                )
                made[session_id] = status
    return made


def _listed(page: str) -> list[str]:
    return re.findall(r'<tr data-session="([^"]+)">', page)


async def test_the_session_list_is_paged_with_the_total_shown(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    made = await _many(path, {"finished": 200, "failed": 100, "paused": 10})
    async with _client(create_app(path, token=TOKEN)) as client:
        first = (await client.get("/")).text
        assert len(_listed(first)) == 50
        assert "sessions 1\u201350 of 310" in first
        assert "page 1 of 7" in first
        assert 'href="/?page=2" id="next-page"' in first
        assert 'href="/?page=7" id="last-page"' in first
        assert "all: 310" in first  # counts over every page
        assert "failed: 100" in first
        seen: list[str] = []
        for page in range(1, 8):
            seen += _listed((await client.get(f"/?page={page}")).text)
        assert sorted(seen) == sorted(made)  # each session on exactly one page
        last = (await client.get("/?page=7")).text
        assert "sessions 301\u2013310 of 310" in last
        assert 'id="next-page"' not in last
        assert 'href="/?page=6" id="previous-page"' in last
        # The status filter and the page size travel with the page links.
        failed = (await client.get("/?status=failed&limit=40")).text
        assert len(_listed(failed)) == 40
        assert {made[session_id] for session_id in _listed(failed)} == {"failed"}
        assert "sessions 1\u201340 of 100 failed" in failed
        assert 'href="/?status=failed&amp;limit=40&amp;page=3" id="last-page"' in failed
        assert len(_listed((await client.get("/?limit=1000")).text)) == 310
        for bad in ("page=0", "page=x", "limit=0", "limit=1001", "limit=-5"):
            refused = await client.get(f"/?{bad}")
            assert refused.status_code == 400, bad
            assert bad.split("=")[0] + " must be a whole number" in refused.text
        beyond = await client.get("/?page=8")
        assert beyond.status_code == 404
        assert "no page 8 of 310 session(s) at 50 a page: 7 page(s)" in beyond.text


# -- 5. a favicon ------------------------------------------------------------------------


async def test_every_page_links_a_favicon_that_is_served(
    ids: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    protected = create_app(path, token=TOKEN, protect_reads=True, allowed_hosts=["*"])
    async with _client(create_app(path, token=TOKEN)) as client, _client(protected) as locked:
        for url in ("/", f"/sessions/{ids['failed']}", "/sessions/nope"):
            page = (await client.get(url)).text
            assert '<link rel="icon" href="/favicon.svg" type="image/svg+xml">' in page, url
        for http in (client, locked):  # the icon needs no token: it shows nothing stored
            for url in ("/favicon.svg", "/favicon.ico"):
                icon = await http.get(url)
                assert icon.status_code == 200, url
                assert icon.headers["content-type"].startswith("image/svg+xml")
                assert icon.text.startswith("<svg")
                assert icon.text.endswith("</svg>")


# -- 6. paths across sessions ----------------------------------------------------------


async def _known(path: Path) -> dict[str, str]:
    """``desk`` sessions of every outcome: finished 1, failed 1, stuck 2 (paused), running 1;
    and one ``chat`` session, which the paths of ``desk`` leave out."""
    ids = await populate(str(path))
    await populate_ids(str(path), ["paused-2"])
    await populate_chat(str(path), 2, session_id="other-machine")
    async with SQLiteStore(path) as store:
        await store.create_session("just-started", machine="desk", snapshot={"question": "q"})
    return ids


#: The moves of `_known`'s ``desk`` sessions, per outcome group.
KNOWN_MOVES = {
    ("INITIALIZED", "ACTING"): {"finished": 1, "failed": 1, "stuck": 2, "running": 0},
    ("ACTING", "ACTING"): {"finished": 1, "failed": 0, "stuck": 0, "running": 0},  # the retry
    ("ACTING", "OBSERVING"): {"finished": 1, "failed": 0, "stuck": 2, "running": 0},
    ("OBSERVING", "FINISHED"): {"finished": 1, "failed": 0, "stuck": 0, "running": 0},
    ("ACTING", "FAILED"): {"finished": 0, "failed": 1, "stuck": 0, "running": 0},
}


class _Counting:
    """A store that counts the reads `gather_paths` makes, passing each on."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads: dict[str, int] = {"sessions": 0, "history": 0}

    async def sessions(self) -> Any:
        self.reads["sessions"] += 1
        return await self.store.sessions()

    async def history(self, session_id: str) -> Any:
        self.reads["history"] += 1
        return await self.store.history(session_id)


async def test_paths_sum_every_session_of_a_machine_by_outcome_in_one_pass(
    tmp_path: Path,
) -> None:
    from arkhon_rheo.inspector._paths import gather_paths

    path = tmp_path / "store.db"
    await _known(path)
    async with SQLiteStore(path) as store:
        counting = _Counting(store)
        paths = await gather_paths(counting, "desk")  # type: ignore[arg-type]
    # One list of the sessions, then one history per session of the machine.
    assert counting.reads == {"sessions": 1, "history": 5}
    assert paths.sessions == {"finished": 1, "failed": 1, "stuck": 2, "running": 1}
    assert paths.moves == KNOWN_MOVES
    # Events per session: finished 6 (think, retry, act, pause, decision, review),
    # failed 2, paused 3 each, the one just started none.
    assert paths.average("finished") == 6.0
    assert paths.average("failed") == 2.0
    assert paths.average("stuck") == 3.0
    assert paths.average("running") == 0.0
    assert paths.stopped == {
        "finished": {"FINISHED": 1},
        "failed": {"FAILED": 1},
        "stuck": {"OBSERVING": 2},
        "running": {},
    }
    async with SQLiteStore(path) as store:
        nothing = await gather_paths(store, "no-such-machine")
    assert nothing.total == 0
    assert nothing.average("finished") is None


@pytest.mark.parametrize("with_machine", [True, False], ids=["machine", "bare"])
async def test_the_paths_page_draws_the_counts_by_outcome(
    tmp_path: Path, with_machine: bool
) -> None:
    path = tmp_path / "store.db"
    ids = await _known(path)
    machines = [desk] if with_machine else []
    async with _client(create_app(path, machines=machines, token=TOKEN)) as client:
        page = (await client.get("/paths?machine=desk")).text
        assert "5 sessions:" in page
        rows = dict(re.findall(r'<tr data-group="(\w+)">(.*?)</tr>', page, re.S))
        assert '<td data-field="sessions">2</td>' in rows["stuck"]
        assert '<td data-field="average">3.0</td>' in rows["stuck"]
        assert '<td data-field="average">6.0</td>' in rows["finished"]
        assert "<code>OBSERVING</code>: 2" in rows["stuck"]
        assert "<code>FAILED</code>: 1" in rows["failed"]
        moves = dict(re.findall(r'<tr data-move="([^"]+)">(.*?)</tr>', page, re.S))
        assert set(moves) == {f"{s}->{t}" for s, t in KNOWN_MOVES}
        first = moves["INITIALIZED->ACTING"]
        assert re.findall(r'<td data-group="(\w+)">(\d*)</td>', first) == [
            ("finished", "1"),
            ("failed", "1"),
            ("stuck", "2"),
            ("running", ""),
            ("all", "4"),
        ]
        # The graph: each move taken labelled with its counts per group, in colour.
        graph = page[page.index("<svg") : page.index("</svg>")]
        assert 'data-move="INITIALIZED->ACTING"' in graph
        assert '<tspan class="n-finished">1</tspan>' in graph
        assert '<tspan class="n-stuck"> 2</tspan>' in graph
        assert "INITIALIZED \u2192 ACTING: finished: 1, failed: 1, stuck: 2" in graph
        assert "2 stopped here" in graph  # the paused sessions, at OBSERVING
        # One group alone.
        failed = (await client.get("/paths?machine=desk&outcome=failed")).text
        assert 'class="graph tone-failed"' in failed
        failed_graph = failed[failed.index("<svg") : failed.index("</svg>")]
        assert '<tspan class="n-failed">1</tspan>' in failed_graph
        assert "n-stuck" not in failed_graph
        # Where to find it: the list, each session's page, the top bar.
        assert 'href="/paths?machine=desk"' in (await client.get("/")).text
        session = (await client.get(f"/sessions/{ids['failed']}")).text
        assert '<a href="/paths?machine=desk" id="paths-link">' in session
        listing = (await client.get("/paths")).text
        assert '<a href="/paths?machine=desk">desk</a> · 5 sessions' in listing
        assert '<a href="/paths?machine=chat">chat</a> · 1 session<' in listing
        # The same counts as JSON.
        data = (await client.get("/api/paths?machine=desk")).json()
        assert data["sessions"] == {"finished": 1, "failed": 1, "stuck": 2, "running": 1}
        assert data["average_events"]["stuck"] == 3.0
        assert {(m["source"], m["target"]): m["stuck"] for m in data["moves"]} == {
            move: counts["stuck"] for move, counts in KNOWN_MOVES.items()
        }
        # Bad input: a clear refusal.
        bad = await client.get("/paths?machine=desk&outcome=lost")
        assert bad.status_code == 400
        assert "outcome must be one of finished, failed, stuck, running, got &#39;lost&#39;" in (
            bad.text
        )
        missing = await client.get("/paths?machine=nope")
        assert missing.status_code == 404
        assert "no session of machine &#39;nope&#39; is stored" in missing.text
        assert (await client.get("/api/paths?machine=nope")).status_code == 404


async def test_the_paths_need_the_token_where_reads_do(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await _known(path)
    app = create_app(path, token=TOKEN, protect_reads=True, allowed_hosts=["*"])
    async with _client(app) as client:
        assert (await client.get("/paths?machine=desk")).status_code == 403
        assert (await client.get("/api/paths?machine=desk")).status_code == 403
        headers = {"X-Arkhon-Token": TOKEN}
        assert (await client.get("/api/paths?machine=desk", headers=headers)).is_success


async def _recorded(path: Path, count: int) -> dict[str, Any]:
    """``count`` sessions of machine ``m`` appended straight to a store, of every status;
    the counts the paths must find, worked out on the side."""
    from arkhon_rheo.protocols import StoredEvent

    route = ["INITIALIZED", "THINKING", "ACTING", "OBSERVING", "THINKING", "ACTING", "DONE"]
    statuses = ["finished", "failed", "paused", "waiting", "running"]
    expected: dict[str, Any] = {"sessions": {}, "events": {}, "moves": {}}
    async with SQLiteStore(path) as store:
        for n in range(count):
            session_id, status, length = f"s{n}", statuses[n % 5], 2 + n % 5
            await store.create_session(session_id, machine="m", snapshot={"x": 0})
            events = [
                StoredEvent(
                    session_id, i + 1, "step", "go", a, b, (), (), {"set": {"x": i}}, 1, 0, 0
                )
                for i, (a, b) in enumerate(itertools.pairwise(route[: length + 1]))
            ]
            await store.append(session_id, events, status=status)
            group = {"paused": "stuck", "waiting": "stuck"}.get(status, status)
            expected["sessions"][group] = expected["sessions"].get(group, 0) + 1
            expected["events"][group] = expected["events"].get(group, 0) + len(events)
            for event in events:
                move = expected["moves"].setdefault((event.from_state, event.to_state), {})
                move[group] = move.get(group, 0) + 1
    return expected


async def _check_paths_of_many(path: Path, count: int) -> None:
    from arkhon_rheo.inspector._paths import gather_paths

    expected = await _recorded(path, count)
    async with SQLiteStore(path) as store:
        for window in (1, 7, 16):  # however many are read at once, the same counts
            paths = await gather_paths(store, "m", window=window)
            assert paths.sessions == expected["sessions"]
            assert paths.events == expected["events"]
            assert {
                move: {group: n for group, n in counts.items() if n}
                for move, counts in paths.moves.items()
            } == expected["moves"]


async def test_paths_over_many_sessions_match_a_count_on_the_side(tmp_path: Path) -> None:
    await _check_paths_of_many(tmp_path / "store.db", 60)


@pytest.mark.slow
async def test_paths_over_thousands_of_sessions_match_a_count_on_the_side(tmp_path: Path) -> None:
    await _check_paths_of_many(tmp_path / "store.db", 3000)


# -- 4. edge labels stand clear (the browser test measures the drawn text) ---------------


async def test_edge_labels_are_laid_out_apart_and_inside_the_drawing(tmp_path: Path) -> None:
    from arkhon_rheo.inspector._graph import _CHAR, _LINE, svg
    from tests.support.inspector_fixture import HUB_ROUTE, hub, populate_hub

    path = tmp_path / "store.db"
    await populate_hub(str(path), {"hub-1": HUB_ROUTE})
    async with SQLiteStore(path) as store:
        drawing = svg(hub.graph(await store.history("hub-1")))
    view = re.search(r'viewBox="([^"]+)"', drawing)
    assert view is not None
    left, top, width, height = map(float, view[1].split())
    boxes = []
    for x, y, text in re.findall(
        r'<text class="count" x="([\d.-]+)" y="([\d.-]+)"[^>]*>([^<]+)<', drawing
    ):
        half = (_CHAR * len(text) + 6) / 2
        boxes.append(
            (float(x) - half, float(y) - 4 - _LINE / 2, float(x) + half, float(y) - 4 + _LINE / 2)
        )
    assert len(boxes) == 9
    for index, box in enumerate(boxes):
        assert left <= box[0], box
        assert box[2] <= left + width, box
        assert top <= box[1], box
        assert box[3] <= top + height, box
        for other in boxes[index + 1 :]:
            apart = (
                box[2] <= other[0] or other[2] <= box[0] or box[3] <= other[1] or other[3] <= box[1]
            )
            assert apart, (box, other)
