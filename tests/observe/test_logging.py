"""The library's logs reach the application's logging, never its stdout, with secrets redacted."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import structlog
from structlog.testing import capture_logs

from arkhon_rheo import redact_secrets
from arkhon_rheo._log import get_logger
from arkhon_rheo._redact import register_secret

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _structlog_unconfigured() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_quickstart_prints_only_its_own_lines(backend: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "actors_quickstart.py"), backend],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # The ask's failure and the watcher's notice may come in either order.
    assert sorted(result.stdout.splitlines()) == sorted(
        [
            "total: 10",
            "the ask failed: cannot add a negative amount: -1 [\"raised by actor 'counter'\"]",
            "counter ended: crashed (ValueError('cannot add a negative amount: -1'))",
            "actors still alive: 1",
        ]
    )
    assert result.stderr == ""  # silent until the application configures logging


def test_unconfigured_events_become_logging_records(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="arkhon_rheo"):
        get_logger("arkhon_rheo.test").warning("something_happened", actor="a", count=2)
    (record,) = [r for r in caplog.records if r.name == "arkhon_rheo.test"]
    assert record.levelno == logging.WARNING
    assert record.msg == {
        "event": "something_happened",
        "actor": "a",
        "count": 2,
        "level": "warning",
    }


def test_levels_below_the_configured_one_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="arkhon_rheo"):
        get_logger("arkhon_rheo.test").info("chatter")
    assert not [r for r in caplog.records if r.name == "arkhon_rheo.test"]


def test_a_configured_structlog_gets_the_events() -> None:
    with capture_logs() as logs:
        get_logger("arkhon_rheo.test").error("went_wrong", error="x")
    assert logs == [{"event": "went_wrong", "error": "x", "log_level": "error"}]


def test_the_readme_recipe_renders_json(capsys: pytest.CaptureFixture[str]) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processor=structlog.processors.JSONRenderer())
    )
    library = logging.getLogger("arkhon_rheo")
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    try:
        get_logger("arkhon_rheo.test").info("hello", session_id="s1")
    finally:
        library.removeHandler(handler)
        library.setLevel(logging.NOTSET)
    line = json.loads(capsys.readouterr().out)
    assert line["event"] == "hello"
    assert line["session_id"] == "s1"


def test_secrets_are_redacted_before_an_event_leaves(caplog: pytest.LogCaptureFixture) -> None:
    register_secret("opaque-key-of-no-known-shape")
    with caplog.at_level(logging.INFO, logger="arkhon_rheo"):
        get_logger("arkhon_rheo.test").warning(
            "call_failed Bearer abcdefgh12345",
            api_key="sk-live-1234567890",
            headers={"Authorization": "Bearer abcdefgh12345", "accept": "json"},
            error="401 for key sk-proj-abcdefghijkl (opaque-key-of-no-known-shape)",
            args=("token=sk-abcdefghijklmnop",),
        )
    text = repr([r.msg for r in caplog.records])
    for secret in ("sk-live", "abcdefgh12345", "sk-proj", "sk-abcdefgh", "opaque-key"):
        assert secret not in text
    (record,) = [r for r in caplog.records if r.name == "arkhon_rheo.test"]
    fields = record.msg
    assert isinstance(fields, dict)
    assert fields["headers"]["accept"] == "json"  # only secrets go
    assert fields["api_key"] == "[REDACTED]"


def test_redaction_is_a_plain_processor() -> None:
    out = redact_secrets(None, "info", {"event": "x", "password": "hunter2", "n": 1})
    assert out == {"event": "x", "password": "[REDACTED]", "n": 1}


def test_a_broken_pipeline_never_raises() -> None:
    def explode(*_: object) -> dict[str, object]:
        raise RuntimeError("broken pipeline")

    structlog.configure(processors=[explode])
    get_logger("arkhon_rheo.test").error("still_fine")  # swallowed
