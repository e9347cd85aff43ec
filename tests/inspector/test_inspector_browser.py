"""The inspector in a real browser: headless Chromium from the system, driven by selenium.

Skipped (with the reason) where selenium, the inspector extra, ``chromium`` or
``chromedriver`` is missing; nothing is downloaded. The server runs in a
subprocess (``python -m arkhon_rheo.inspector``), on trio. Screenshots of the
main views are written to ``$ARKHON_SCREENSHOTS`` (default
``tests/screenshots/``, ignored by git).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo.store import SQLiteStore

pytest.importorskip("starlette", reason="the inspector extra is not installed")
pytest.importorskip("hypercorn", reason="the inspector extra is not installed")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from tests.support.browser import CHROMEDRIVER, CHROMIUM, NO_CHROMIUM, chromium  # noqa: E402
from tests.support.inspector_fixture import (  # noqa: E402
    HUB_ROUTE,
    populate,
    populate_chat,
    populate_hub,
    populate_ids,
)

if TYPE_CHECKING:
    from collections.abc import Iterator


def _wait(browser: Any, seconds: float = 10) -> Any:
    """Wait for a condition, through pages that reload or re-render meanwhile."""
    return WebDriverWait(
        browser,
        seconds,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )


ROOT = Path(__file__).resolve().parents[2]


pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=NO_CHROMIUM),
]

#: Paused sessions whose ids URLs and CSS selectors give a meaning to.
ODD_IDS = ["a/b/1", "%41", "what?x=1", "tag#2", 'say "hi"', "with space", "ünï ☃"]

#: A session of 11 events, each adding a message to its conversation.
CHAT = "chat-11"
#: A session through every move of a machine of many moves out of one state.
HUB = "hub-1"

SHOTS = Path(os.environ.get("ARKHON_SCREENSHOTS", ROOT / "tests" / "screenshots"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A store of varied sessions, and the inspector serving it on a free port."""
    path = tmp_path_factory.mktemp("inspector") / "store.db"
    ids = anyio.run(populate, str(path))
    anyio.run(populate_ids, str(path), ODD_IDS)
    anyio.run(populate_chat, str(path), 11, CHAT)
    anyio.run(populate_hub, str(path), {HUB: HUB_ROUTE})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "arkhon_rheo.inspector",
            "--store",
            str(path),
            "--port",
            "0",
            "--machine",
            "tests.support.inspector_fixture:desk",
            "--machine",
            "tests.support.inspector_fixture:chat",
            "--machine",
            "tests.support.inspector_fixture:hub",
            "--backend",
            "trio",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "open http" in line, line
        url = line.split("open ", 1)[1].strip()
        yield {"path": path, "ids": ids, "url": url, "base": url.split("/?token=")[0]}
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def _shot(browser: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / f"{name}.png"))


def _stored(path: Path, session_id: str) -> tuple[Any, ...]:
    async def read() -> tuple[Any, ...]:
        async with SQLiteStore(path) as store:
            return (await store.record(session_id), await store.history(session_id))

    return anyio.run(read)


def test_the_views_in_a_browser(served: dict[str, Any], browser: Any) -> None:
    ids, base = served["ids"], served["base"]
    # Opening the printed address keeps the token, then shows the list without it.
    browser.get(served["url"])
    assert browser.current_url == base + "/"
    rows = browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
    assert {row.get_attribute("data-session") for row in rows} == {
        *ids.values(),
        *ODD_IDS,
        CHAT,
        HUB,
    }
    assert "read-only" not in browser.page_source
    _shot(browser, "sessions")

    browser.get(f"{base}/sessions/{ids['finished']}")
    _wait(browser).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#event-2 .failure").text.startswith(
            "Recoverable recoverable"
        )
    )
    taken = browser.find_elements(By.CSS_SELECTOR, "svg.graph .move.taken")
    assert len(taken) == 4  # INITIALIZED→ACTING (→ACTING, the retry)→OBSERVING→FINISHED
    _wait(browser).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#event-1 details.calls summary").click() is None
    )
    _wait(browser).until(
        lambda b: "look up <flaky printer>" in b.find_element(By.CSS_SELECTOR, "#event-1").text
    )
    _shot(browser, "session-timeline")

    browser.find_element(By.CSS_SELECTOR, "#verify-form button").click()
    _wait(browser).until(
        lambda b: "replays to the committed states" in b.find_element(By.ID, "replay").text
    )
    browser.find_element(By.CSS_SELECTOR, "#reexecute-form button").click()
    _wait(browser).until(lambda b: "re-executed" in b.find_element(By.ID, "replay").text)
    _shot(browser, "replay")


def test_deciding_a_paused_session_in_a_browser(served: dict[str, Any], browser: Any) -> None:
    ids, base, path = served["ids"], served["base"], served["path"]
    browser.get(served["url"])
    paused = ids["paused"]
    browser.get(f"{base}/sessions/{paused}")
    before = _stored(path, paused)
    # An edit the state's validation refuses: shown inline, nothing stored.
    field = browser.find_element(By.NAME, "field.priority")
    field.clear()
    field.send_keys('"urgent"')
    browser.find_element(By.CSS_SELECTOR, "#edit-form button").click()
    error = _wait(browser).until(lambda b: b.find_element(By.ID, "error"))
    assert "InvalidPatch" in error.text
    assert browser.find_element(By.NAME, "field.priority").get_attribute("value") == '"urgent"'
    _shot(browser, "edit-refused")
    assert _stored(path, paused) == before

    # The session list, open in the browser, follows the decision live.
    browser.get(f"{base}/?status=paused")
    browser.execute_script("window.open(arguments[0], 'decide')", f"{base}/sessions/{paused}")
    list_tab, decide_tab = browser.window_handles
    browser.switch_to.window(decide_tab)
    _wait(browser).until(lambda b: b.find_elements(By.ID, "resume-form"))
    _shot(browser, "paused-session")
    browser.find_element(By.CSS_SELECTOR, "#resume-form button").click()
    _wait(browser).until(lambda b: b.find_elements(By.ID, "done"))
    _wait(browser, 15).until(lambda b: b.find_element(By.ID, "status").text == "finished")
    browser.close()
    browser.switch_to.window(list_tab)
    cell = f'tr[data-session="{paused}"] [data-field="status"]'
    _wait(browser, 15).until(lambda b: b.find_element(By.CSS_SELECTOR, cell).text == "finished")
    record, history = _stored(path, paused)
    assert record.status == "finished"
    assert [event.kind for event in history][-2:] == ["decision", "step"]


def _row(browser: Any, session_id: str) -> Any:
    """The session list's row of ``session_id`` (found without a selector built from it)."""
    for row in browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"):
        if row.get_attribute("data-session") == session_id:
            return row
    raise NoSuchElementException(session_id)


def test_every_kind_of_session_id_opens_from_the_list(served: dict[str, Any], browser: Any) -> None:
    base = served["base"]
    browser.get(served["url"])
    for session_id in ODD_IDS:
        browser.get(base + "/")
        _row(browser, session_id).find_element(By.TAG_NAME, "a").click()
        heading = _wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, "h1 code"))
        assert heading.text == session_id
        assert browser.find_element(By.ID, "status").text == "paused"
        assert browser.find_elements(By.ID, "resume-form"), session_id
    # The page of a subgraph child's id decides that session.
    browser.get(base + "/")
    _row(browser, "a/b/1").find_element(By.TAG_NAME, "a").click()
    _wait(browser).until(lambda b: b.find_elements(By.ID, "abort-form"))
    browser.find_element(By.CSS_SELECTOR, "#abort-form button").click()
    _wait(browser).until(lambda b: b.find_elements(By.ID, "done"))
    assert browser.find_element(By.CSS_SELECTOR, "h1 code").text == "a/b/1"
    record, _ = _stored(served["path"], "a/b/1")
    assert record.status == "aborted"


def test_the_list_follows_a_session_whose_id_has_a_quote(
    served: dict[str, Any], browser: Any
) -> None:
    from urllib.parse import quote

    import httpx

    base, token = served["url"].split("/?token=")
    browser.get(served["url"])
    quoted = 'say "hi"'
    assert _row(browser, quoted).find_element(By.CSS_SELECTOR, '[data-field="status"]').text == (
        "paused"
    )
    done = httpx.post(
        f"{base}/sessions/{quote(quoted, safe='')}/decide",
        data={"decision": "abort"},
        headers={"X-Arkhon-Token": token},
    )
    assert done.status_code == 303
    _wait(browser, 15).until(
        lambda b: (
            _row(b, quoted).find_element(By.CSS_SELECTOR, '[data-field="status"]').text == "aborted"
        )
    )


def test_a_long_conversation_shows_each_message_once(served: dict[str, Any], browser: Any) -> None:
    """Each step shows the message it added, not the conversation again: the page stays short."""
    browser.get(served["url"])
    browser.get(f"{served['base']}/sessions/{CHAT}")
    _wait(browser).until(lambda b: b.find_elements(By.ID, "event-11"))
    height = browser.execute_script("return document.documentElement.scrollHeight")
    # Each step's row shows the message it appended and two keys of its mapping (about
    # 140 px, the page about 2,900 px); before, every row reprinted the conversation:
    # rows grew to 760 px, the page to 5,961 px.
    rows = browser.find_elements(By.CSS_SELECTOR, "table.timeline > tbody > tr")
    assert len(rows) == 11
    assert max(row.size["height"] for row in rows) < 200, [row.size["height"] for row in rows]
    assert height < 3500, height
    _shot(browser, "session-conversation")
    # The whole state at a step is one click away.
    browser.find_element(By.CSS_SELECTOR, "#event-4 a.state-link").click()
    table = _wait(browser).until(lambda b: b.find_element(By.ID, "state-at"))
    assert "message 0003:" in table.text
    assert "message 0004:" not in table.text


def test_a_failed_session_says_why_without_scrolling(served: dict[str, Any], browser: Any) -> None:
    browser.get(served["url"])
    browser.get(f"{served['base']}/sessions/{served['ids']['failed']}")
    reason = _wait(browser).until(lambda b: b.find_element(By.ID, "outcome-reason"))
    assert "lookup refused" in reason.text
    top = reason.location["y"] + reason.size["height"]
    assert top < browser.execute_script("return window.innerHeight"), top
    _shot(browser, "session-failed")


def _boxes(browser: Any, selector: str) -> list[dict[str, float]]:
    script = (
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => {"
        " const r = e.getBoundingClientRect();"
        " return {left: r.left, top: r.top, right: r.right, bottom: r.bottom,"
        " text: e.textContent}; })"
    )
    return list(browser.execute_script(script, selector))


def _meet(one: dict[str, float], other: dict[str, float]) -> bool:
    return min(one["right"], other["right"]) > max(one["left"], other["left"]) and min(
        one["bottom"], other["bottom"]
    ) > max(one["top"], other["top"])


def test_edge_labels_do_not_overlap(served: dict[str, Any], browser: Any) -> None:
    """Many moves out of one state, both ways between two: every label stands clear."""
    browser.get(served["url"])
    browser.get(f"{served['base']}/sessions/{HUB}")
    _wait(browser).until(lambda b: b.find_elements(By.CSS_SELECTOR, "svg.graph text.count"))
    labels = _boxes(browser, "svg.graph text.count")
    assert len(labels) == 9, [label["text"] for label in labels]  # every move taken
    states = _boxes(browser, "svg.graph .state rect")
    (drawing,) = _boxes(browser, "svg.graph")
    for index, label in enumerate(labels):
        for other in labels[index + 1 :]:
            assert not _meet(label, other), (label, other)
        for state in states:
            assert not _meet(label, state), (label, state)
        # Inside the drawing: none cut off at its edge.
        assert drawing["left"] <= label["left"], label
        assert label["right"] <= drawing["right"], label
        assert drawing["top"] <= label["top"], label
        assert label["bottom"] <= drawing["bottom"], label
    _shot(browser, "graph-labels")


def test_the_paths_across_sessions_in_a_browser(served: dict[str, Any], browser: Any) -> None:
    browser.get(served["url"])
    browser.find_element(By.ID, "paths-links").find_element(By.LINK_TEXT, "desk").click()
    _wait(browser).until(lambda b: b.find_elements(By.ID, "outcomes"))
    assert browser.find_element(By.CSS_SELECTOR, "h1 code").text == "desk"
    sessions = {
        row.get_attribute("data-group"): int(row.find_element(By.CSS_SELECTOR, "td").text)
        for row in browser.find_elements(By.CSS_SELECTOR, "#outcomes tbody tr")
    }
    # populate's three, and the seven paused under odd ids (some decided by now).
    assert sum(sessions.values()) == 10, sessions
    assert sessions["failed"] >= 1
    labels = _boxes(browser, "svg.graph text.count")
    assert labels
    for index, label in enumerate(labels):
        for other in labels[index + 1 :]:
            assert not _meet(label, other), (label, other)
    _shot(browser, "paths")
    browser.find_element(By.ID, "outcome-stuck").click()
    _wait(browser).until(lambda b: b.find_elements(By.CSS_SELECTOR, "svg.graph.tone-stuck"))
    _shot(browser, "paths-stuck")
    browser.get(f"{served['base']}/paths?machine=hub")
    _wait(browser).until(lambda b: b.find_elements(By.ID, "moves"))
    hub_labels = _boxes(browser, "svg.graph text.count")
    assert len(hub_labels) == 9
    for index, label in enumerate(hub_labels):
        for other in hub_labels[index + 1 :]:
            assert not _meet(label, other), (label, other)
    _shot(browser, "paths-hub")
