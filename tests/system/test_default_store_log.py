"""``AgentSystem()`` keeps its sessions in ``./arkhon-rheo.db``, and says so once, at info."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.session import _default_store

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def announcements(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        record.msg
        for record in caplog.records
        if record.name == "arkhon_rheo.system"
        and isinstance(record.msg, dict)
        and record.msg.get("event") == "default_store"
    ]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_default_store, "_announced", set())
    return tmp_path


async def test_the_default_store_is_logged_once_with_its_path(
    here: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="arkhon_rheo"):
        async with AgentSystem() as system:
            assert system.store is not None
        async with AgentSystem():
            pass
    [line] = announcements(caplog)
    assert line["path"] == str(here / "arkhon-rheo.db")
    assert (here / "arkhon-rheo.db").exists()
    for way in ("AgentSystem(path=...)", "store=...", "path=None"):
        assert way in line["hint"]
    [record] = [r for r in caplog.records if r.msg is line]
    assert record.levelno == logging.INFO


async def test_a_store_or_a_path_of_your_own_is_not_announced(
    here: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="arkhon_rheo"):
        async with AgentSystem(path=here / "mine.db"):
            pass
        async with AgentSystem(store=str(here / "other.db")):
            pass
        async with AgentSystem(path=None):
            pass
    assert announcements(caplog) == []
    assert not (here / "arkhon-rheo.db").exists()
