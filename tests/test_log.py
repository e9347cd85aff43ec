"""The library's logs: never in the application's stdout, secrets redacted, and its info events.

The events a session logs (start and end, commits, retries, restarts, pauses)
reach the application's logging or structlog configuration, or `configure_logging`'s
handler; a broken pipeline never breaks the runtime.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from structlog.testing import capture_logs

from arkhon_rheo import (
    AgentSystem,
    Backoff,
    ConfigurationError,
    Transient,
    configure_logging,
    redact_secrets,
)
from arkhon_rheo._log import get_logger, unconfigure_logging
from arkhon_rheo._redact import register_secret
from tests.support.observe_machine import OUTCOMES, Flow, flow_machine, troubled

if TYPE_CHECKING:
    from collections.abc import Iterator, MutableMapping, Sequence

pytestmark = pytest.mark.anyio

NO_WAIT = Backoff(base=0, cap=0, max_attempts=3)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True)
def _logging_unconfigured() -> Iterator[None]:
    structlog.reset_defaults()
    OUTCOMES.clear()
    yield
    unconfigure_logging()
    structlog.reset_defaults()


async def _run(*, gate: bool = False) -> str:
    async with AgentSystem(path=None, backoff=NO_WAIT) as system:
        handle = await system.start(flow_machine(gate=gate), Flow(), session_id="s-1")
        await handle.result()
        return handle.session_id


def _named(logs: Sequence[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == event]


async def test_a_run_logs_its_start_commits_retry_restart_and_end() -> None:
    troubled()
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        await _run()
    (started,) = _named(logs, "session_started")
    assert started["machine"] == "flow"
    assert started["lifecycle"] == "start"
    assert started["resumed"] is False
    commits = _named(logs, "transition_committed")
    assert [(c["kind"], c["stage"], c["from_state"], c["to_state"]) for c in commits] == [
        ("step", "begin", "start", "work"),
        ("failure", "work", "work", "work"),
        ("step", "work", "work", "done"),
    ]
    assert commits[0]["writes"] == ["note"]
    assert commits[2]["writes"] == ["count"]
    assert [c["seq"] for c in commits] == [1, 2, 3]
    (retry,) = _named(logs, "stage_retrying")
    assert retry["stage"] == "work"
    assert retry["attempt"] == 2
    assert "flaky link" in retry["error"]
    assert _named(logs, "stages_restarted")[0]["stages"] == ["work"]
    (ended,) = _named(logs, "session_ended")
    assert ended["exit_reason"] == "finished"
    assert (ended["steps"], ended["retries"], ended["restarts"]) == (3, 1, 1)
    assert ended["duration"] >= 0
    # Bound through contextvars in the supervisor's task: every line names the session.
    assert {entry["session_id"] for entry in logs} == {"s-1"}
    assert all(entry["log_level"] in {"info", "warning"} for entry in logs)
    # The stage is bound too: a line without a stage field of its own still names it.
    (restarted,) = _named(logs, "stages_restarted")
    assert restarted["stage"] == "work"


async def test_a_pause_is_logged() -> None:
    with capture_logs() as logs:
        await _run(gate=True)
    (paused,) = _named(logs, "session_paused")
    assert (paused["gate"], paused["stage"]) == ("review", "work")
    assert _named(logs, "session_ended")[0]["exit_reason"] == "paused"


async def test_unconfigured_the_events_are_logging_records_with_bound_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="arkhon_rheo"):
        await _run()
    fields = [r.msg for r in caplog.records if r.name == "arkhon_rheo.supervision"]
    assert all(isinstance(f, dict) for f in fields)
    events = [f["event"] for f in fields if isinstance(f, dict)]
    assert events[0] == "session_started"
    assert events[-1] == "session_ended"
    assert events.count("transition_committed") == 2
    assert all(isinstance(f, dict) and f["session_id"] == "s-1" for f in fields)


async def test_nothing_is_built_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("arkhon_rheo.supervision")
    assert not logger.is_enabled(logging.INFO)  # the default: warnings only, to a NullHandler
    with caplog.at_level(logging.INFO, logger="arkhon_rheo"):
        assert logger.is_enabled(logging.INFO)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    assert not logger.is_enabled(logging.INFO)
    assert logger.is_enabled(logging.WARNING)
    structlog.configure(wrapper_class=structlog.stdlib.BoundLogger)
    assert not logger.is_enabled(logging.INFO)  # the stdlib logger decides
    await _run()
    assert not [r for r in caplog.records if r.name.startswith("arkhon_rheo")]


async def test_configure_logging_writes_json_lines_with_secrets_redacted() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    OUTCOMES[:] = [Transient("the link refused token sk-abcdefghijklmnop")]
    await _run()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    events = [line["event"] for line in lines]
    assert events[0] == "session_started"
    assert events[-1] == "session_ended"
    assert "stage_retrying" in events
    assert all(line["session_id"] == "s-1" and "timestamp" in line for line in lines)
    assert all(line["level"] == "info" for line in lines)
    assert "sk-abcdefghijklmnop" not in out.getvalue()
    assert "[REDACTED]" in out.getvalue()


async def test_logs_show_no_sensitive_value(tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="the `secrets` extra is not installed")
    from arkhon_rheo.core import Keyring
    from tests.support.sensitive import FAILURES, SECRETS, TOKEN, Vault, vault

    out = io.StringIO()
    configure_logging("json", level="debug", stream=out)
    FAILURES.clear()
    keyring = Keyring(Keyring.generate())
    async with AgentSystem(path=tmp_path / "vault.db", secrets=keyring) as system:
        await system.run(vault, Vault(token=TOKEN), session_id="v1")
        await (await system.stored(vault, "v1").approve()).result()
    FAILURES.clear()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    (retrying,) = [line for line in lines if line["event"] == "stage_retrying"]
    assert "the bank refused token [REDACTED]" in retrying["error"]
    assert {"session_paused", "session_ended"} <= {line["event"] for line in lines}
    for secret in SECRETS:
        assert secret not in out.getvalue()


async def test_configure_logging_console_and_level() -> None:
    out = io.StringIO()
    configure_logging("console", level="warning", stream=out)
    await _run()
    assert out.getvalue() == ""  # nothing at warning or above in a clean run
    configure_logging(level=logging.INFO, stream=out)  # replaces the handler
    await _run()
    text = out.getvalue()
    assert "transition_committed" in text
    assert "session_id=s-1" in text
    handlers = logging.getLogger("arkhon_rheo").handlers
    assert len([h for h in handlers if isinstance(h, logging.StreamHandler)]) == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"format": "xml"}, "takes 'console' or 'json', got 'xml'"),
        ({"level": "loud"}, "got 'loud'"),
        ({"level": -1}, "got -1"),
        ({"level": True}, "got True"),
    ],
)
def test_configure_logging_refuses_bad_arguments(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        configure_logging(**arguments)
    assert logging.getLogger("arkhon_rheo").level == logging.NOTSET  # nothing half-done


def test_importing_the_library_configures_nothing() -> None:
    code = (
        "import logging, structlog, arkhon_rheo, arkhon_rheo.observe; "
        "lib = logging.getLogger('arkhon_rheo'); "
        "print([type(h).__name__ for h in lib.handlers], lib.level, lib.propagate, "
        "structlog.is_configured(), logging.getLogger().handlers)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "['NullHandler'] 0 True False []"


# -- never in the application's stdout; secrets redacted -----------------------------------


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
