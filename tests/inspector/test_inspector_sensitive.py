"""The inspector and sensitive fields: no page shows a value, with the key or without it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import httpx
import pytest

from arkhon_rheo import AgentSystem, ExitReason

pytest.importorskip("starlette", reason="the inspector extra is not installed")
pytest.importorskip("hypercorn", reason="the inspector extra is not installed")
pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring
from arkhon_rheo.inspector import create_app
from tests.support.sensitive import FAILURES, NEW_TOKEN, SECRETS, TOKEN, Vault, vault

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from starlette.applications import Starlette

pytestmark = pytest.mark.anyio

ADMIN = "inspector-admin-token"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FAILURES.clear()
    yield
    FAILURES.clear()


@pytest.fixture
def key() -> str:
    return Keyring.generate()


@pytest.fixture
async def store_path(tmp_path: Path, key: str) -> Path:
    """A store with vault session ``v1`` paused at its gate and ``v2`` finished."""
    path = tmp_path / "vault.db"
    async with AgentSystem(path=path, secrets=Keyring(key)) as system:
        for session_id in ("v1", "v2"):
            result = await system.run(vault, Vault(token=TOKEN), session_id=session_id)
            assert result.exit_reason is ExitReason.PAUSED
        finished = await (await system.stored(vault, "v2").approve()).result()
        assert finished.exit_reason is ExitReason.FINISHED
    return path


@contextlib.asynccontextmanager
async def _client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        yield client


def _hidden(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown on {where}"


async def _pages(client: httpx.AsyncClient) -> dict[str, str]:
    pages = {}
    for url in ("/", "/sessions/v1", "/sessions/v2", "/api/sessions", "/api/sessions/v1"):
        answer = await client.get(url)
        assert answer.status_code == 200, url
        _hidden(answer.text, url)
        pages[url] = answer.text
    return pages


async def test_no_page_shows_a_value_with_the_key_the_fold_exact(
    store_path: Path, key: str
) -> None:
    app = create_app(store_path, machines=[vault], token=ADMIN, secrets=Keyring(key))
    async with _client(app) as client:
        pages = await _pages(client)
        page = pages["/sessions/v1"]
        assert "folded by the session&#39;s machine" in page
        assert "[SENSITIVE]" in page
        assert "[REDACTED]" in page  # the recorded request, the failure, the question
        for reexecute in ("0", "1"):
            replayed = await client.post(
                "/sessions/v2/replay", data={"token": ADMIN, "reexecute": reexecute}
            )
            assert "The log replays to the committed states" in replayed.text
            _hidden(replayed.text, "a replay's page")


async def test_no_page_shows_a_value_without_the_key(store_path: Path) -> None:
    for machines in ([vault], []):
        async with _client(create_app(store_path, machines=machines, token=ADMIN)) as client:
            page = (await _pages(client))["/sessions/v1"]
            assert "[SENSITIVE]" in page
            if machines:
                assert "no keyring was given" in page  # why the machine could not fold it
            replayed = await client.post("/sessions/v2/replay", data={"token": ADMIN})
            _hidden(replayed.text, "a refused replay's page")


async def test_an_edit_from_the_page_keeps_the_sensitive_value_it_did_not_change(
    store_path: Path, key: str
) -> None:
    app = create_app(store_path, machines=[vault], token=ADMIN, secrets=Keyring(key))
    async with _client(app) as client:
        form = (await client.get("/sessions/v1")).text
        assert 'name="field.token"' in form
        answer = await client.post(
            "/sessions/v1/decide",
            data={
                "token": ADMIN,
                "decision": "edit",
                "field.token": '"[SENSITIVE]"',  # left as shown: not an edit
                "field.user": '"bob"',
            },
        )
        assert answer.status_code == 303
        resumed = await client.post(
            "/sessions/v1/decide", data={"token": ADMIN, "decision": "resume"}
        )
        assert resumed.status_code == 303
        system = app.state.inspector.system
        result = await system.session("v1").result()
        assert result.exit_reason is ExitReason.FINISHED
        assert (result.state.token, result.state.user) == (NEW_TOKEN, "bob")
        await _pages(client)
