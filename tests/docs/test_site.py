"""The documentation site: built with ``mkdocs build --strict``, checked file by file and live.

One build per module (into a temporary directory, as ``.ci/run`` builds it:
``NO_MKDOCS_2_WARNING=1``, strict). Then, without a browser: no internal link
or anchor of any built page is broken, no page loads anything from another
host (no web fonts, no CDN: the site works offline), and every public name of
each package has its anchor on its API page. With the system's headless
Chromium (selenium, as ``tests/inspector/test_inspector_browser.py`` drives
it; skipped with the reason where it is missing): the home page, a how-to and
an API page open from a local HTTP server, each shows its heading, loads
nothing from elsewhere, and is screenshot. Skipped where the ``docs`` extra
(mkdocs) is not installed.
"""

from __future__ import annotations

import functools
import html
import http.server
import importlib
import os
import re
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs import PACKAGES
from tests.support.browser import CHROMEDRIVER, CHROMIUM, NO_CHROMIUM, chromium

if TYPE_CHECKING:
    from collections.abc import Iterator

pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("material", reason="the docs extra is not installed (mkdocs-material)")
pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (mkdocstrings)")

ROOT = Path(__file__).resolve().parents[2]

#: The pages the browser opens: the home page, one how-to, one API page.
PAGES = {"home": "", "how-to": "how-to/durability/", "api": "reference/api/system/"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with ``mkdocs build --strict`` from the repository's mkdocs.yml."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr[-6000:]}"
    assert (out / "index.html").is_file()
    # mkdocstrings formats the signatures with ruff (the docs extra), or says it cannot.
    assert "Formatting signatures requires" not in build.stderr
    return out


class _Page(HTMLParser):
    """The ids of one HTML page, and every URL its tags point at."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        #: ``(tag, attribute, url)`` of every ``href`` and ``src``.
        self.urls: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                self.ids.add(value)
            elif name in ("href", "src"):
                self.urls.append((tag, name, value))


@functools.cache
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _pages(site: Path) -> list[Path]:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30, "the site has too few pages"
    return pages


def _target(site: Path, page: Path, url: str) -> tuple[Path, str] | None:
    """The file and fragment an internal ``url`` of ``page`` points at; None for another site's."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        return None
    path = unquote(parts.path)
    if not path:
        target = page
    elif path.startswith("/"):
        target = site / path.lstrip("/")
    else:
        target = page.parent / path
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target.resolve(), unquote(parts.fragment)


def test_no_internal_link_or_anchor_of_the_built_site_is_broken(site: Path) -> None:
    broken: list[str] = []
    checked = 0
    for page in _pages(site):
        for tag, attribute, url in _parse(page).urls:
            found = _target(site, page, url)
            if found is None:
                continue
            target, fragment = found
            checked += 1
            where = f"{page.relative_to(site)}: <{tag} {attribute}={url!r}>"
            if not target.is_file():
                broken.append(f"{where}: no file {target}")
            elif fragment and target.suffix == ".html" and fragment not in _parse(target).ids:
                broken.append(f"{where}: no #{fragment} in {target.relative_to(site)}")
    assert checked > 1000
    assert not broken, "broken links:\n" + "\n".join(broken[:50])


def test_no_page_loads_anything_from_another_host(site: Path) -> None:
    """No web font, no CDN: every stylesheet, script and image is the site's own."""
    remote: list[str] = []
    for page in _pages(site):
        text = page.read_text(encoding="utf-8")
        banned = ("fonts.googleapis", "fonts.gstatic", "cdn.jsdelivr", "unpkg.com")
        remote += [f"{page.relative_to(site)}: mentions {b}" for b in banned if b in text]
        for tag, attribute, url in _parse(page).urls:
            loaded = attribute == "src" or tag == "link"
            if loaded and (urlsplit(url).netloc or url.startswith("//")):
                remote.append(f"{page.relative_to(site)}: <{tag} {attribute}={url!r}>")
            if "cdn." in urlsplit(url).netloc:
                remote.append(f"{page.relative_to(site)}: <{tag} {attribute}={url!r}>")
    remote += [
        f"{sheet.relative_to(site)}: imports a web font"
        for sheet in site.rglob("*.css")
        if "fonts.googleapis" in sheet.read_text(encoding="utf-8", errors="replace")
    ]
    assert not remote, "the site reaches out:\n" + "\n".join(remote[:50])


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_its_anchor_on_its_api_page(site: Path, package: str) -> None:
    module = importlib.import_module(f"arkhon_rheo.{package}")
    page = _parse(site / "reference" / "api" / package / "index.html")
    missing = [name for name in module.__all__ if f"arkhon_rheo.{package}.{name}" not in page.ids]
    assert not missing, f"arkhon_rheo.{package}: no reference for {missing}"
    private = sorted(i for i in page.ids if re.search(r"^arkhon_rheo\..*\._(?!_)", i))
    assert not private, f"private names on the page: {private[:10]}"


def _text(path: Path) -> str:
    """What a page shows: its HTML without scripts, styles and tags."""
    page = re.sub(r"<(script|style)\b.*?</\1>", "", path.read_text(encoding="utf-8"), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


#: A private name of the library: ``_name`` alone, ``self._name`` or ``arkhon_rheo.x._name``.
_PRIVATE = re.compile(r"(?<![\w.])_[a-z]\w*|\b(?:self|arkhon_rheo(?:\.\w+)*)\._[a-z]\w*")


@pytest.mark.parametrize("package", PACKAGES)
def test_an_api_page_names_nothing_private_and_each_return_in_one_row(
    site: Path, package: str
) -> None:
    path = site / "reference" / "api" / package / "index.html"
    private = sorted(set(_PRIVATE.findall(_text(path))))
    assert not private, f"private names on the {package} page: {private}"
    # A google ``Returns:`` (or ``Yields:``) is one description, however many lines it
    # has: a table row of its own for each line means an unindented continuation.
    sections = re.findall(
        r'doc-section-title">(?:Returns|Yields):</span></p>\s*<table>(.*?)</table>',
        path.read_text(encoding="utf-8"),
        re.S,
    )
    split = [s for s in sections if s.count('<tr class="doc-section-item">') > 1]
    assert not split, f"{package}: a Returns section in several rows:\n{split[0][:2000]}"


@pytest.mark.parametrize("package", ["react", "system"])
def test_the_page_of_a_package_introduced_on_it_says_its_introduction_once(
    site: Path, package: str
) -> None:
    path = site / "reference" / "api" / package / "index.html"
    # The page's own paragraph, then the package's members: not its docstring again.
    assert {"react": "The ReAct engine:", "system": "The agent system,"}[package] in _text(path)
    page = path.read_text(encoding="utf-8")
    assert re.search(r'<div class="doc doc-contents first">\s*<div class="doc doc-children">', page)


# -- in a real browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (a free port), from a thread of this process."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test's output clean."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=NO_CHROMIUM)
@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_page_opens_in_chromium_with_its_heading_and_a_screenshot(
    name: str, served: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url = served + PAGES[name]
    browser.get(url)
    heading = WebDriverWait(browser, 20).until(lambda b: b.find_element(By.CSS_SELECTOR, "h1"))
    assert heading.text.strip(), f"{url}: an empty h1"
    WebDriverWait(browser, 20).until(
        lambda b: b.execute_script("return document.readyState") == "complete"
    )
    title = browser.title
    assert "arkhon-rheo" in title, title
    # Everything the page loaded came from this server: no font or script from elsewhere.
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    elsewhere = [entry for entry in loaded if not entry.startswith(served)]
    assert not elsewhere, f"{url} loaded {elsewhere}"
    # The theme's stylesheet applied: the header bar is laid out, not unstyled text.
    header = browser.find_element(By.CSS_SELECTOR, "header.md-header")
    assert header.size["height"] > 0
    shot = tmp_path / f"{name}.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 1000
