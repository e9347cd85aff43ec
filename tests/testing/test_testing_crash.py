"""The public crash harness, `arkhon_rheo.testing.crash_loop`, as a user calls it.

`tests/testing/test_crash.py` runs the project's own crash test on it with deeper
checks of the file; here: its report, its schedule, and its errors.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import ConfigurationError
from arkhon_rheo.protocols import Durability, Lifecycle
from arkhon_rheo.testing import CrashReport, CrashRunFailed, LostCommit, crash_loop

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="crash_loop kills its child with SIGKILL"
)

MACHINE = "tests.crash_child:machine"
STATE = "tests.crash_child:initial"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_quick_crash_loop_loses_nothing_acknowledged_and_replays(
    tmp_path: Path, backend: str
) -> None:
    checked: list[Path] = []
    report = crash_loop(
        MACHINE,
        STATE,
        path=tmp_path / "agent.db",
        kills=4,
        sessions=3,
        seed=7,
        backend=backend,
        check=checked.append,
    )
    assert report.ok, report.summary()
    assert report.kills == 4
    assert report.runs >= 5  # four killed, one undisturbed (and any that ended early)
    assert report.acknowledged > 0
    assert report.lost == ()
    assert report.integrity == ()
    assert report.checks == report.runs == len(checked)
    assert checked[0] == tmp_path / "agent.db"
    # The three first sessions and one more per run (unless killed before it began),
    # each replayed to a finished state.
    assert {"s0000", "s0001", "s0002"} <= set(report.replays)
    assert 3 < len(report.replays) <= 3 + report.runs
    for replay in report.replays.values():
        assert replay.ok
        assert replay.state.lifecycle is Lifecycle.FINISHED
    assert report.unfinished == ()
    assert report.failed == ()
    assert report.summary().startswith(f"4 kills over {report.runs} runs")


def test_no_kills_is_one_undisturbed_run(tmp_path: Path) -> None:
    report = crash_loop(MACHINE, STATE, path=tmp_path / "agent.db", kills=0, sessions=2)
    assert report.ok, report.summary()
    assert (report.kills, report.runs, report.checks) == (0, 1, 1)
    assert set(report.replays) == {"s0000", "s0001", "r0000-0"}
    # Each session's creation and its 12 steps (4 cycles of 3).
    assert report.acknowledged == 3 * 13


def test_a_report_says_what_was_lost() -> None:
    report = CrashReport(
        kills=1,
        runs=2,
        acknowledged=5,
        lost=(LostCommit("s0000", 4, 2), LostCommit("s0001", 0, None)),
        integrity=("after run 0: page 3 is never used",),
        checks=2,
        replays={},
        unfinished=("s0002",),
        failed=("s0003 failed",),
    )
    assert not report.ok
    assert report.summary().splitlines()[1:] == [
        "lost: s0000 acknowledged #4, stored up to #2",
        "lost: s0001 acknowledged #0, stored nothing",
        "integrity: after run 0: page 3 is never used",
        "unfinished: s0002",
        "failed: s0003 failed",
    ]


@pytest.mark.parametrize(
    ("machine", "state", "words"),
    [
        ("tests.crash_child", STATE, "'module:attr'"),
        ("tests.no_such_module:machine", STATE, "cannot import module"),
        ("tests.crash_child:nothing", STATE, "has no attribute 'nothing'"),
        ("tests.crash_child:ROUNDS", STATE, "must name a Machine"),
        (MACHINE, "tests.crash_child:ROUNDS", "fresh initial state"),
    ],
)
def test_a_bad_name_is_refused_before_any_child_runs(
    tmp_path: Path, machine: str, state: str, words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words):
        crash_loop(machine, state, path=tmp_path / "agent.db")
    assert not (tmp_path / "agent.db").exists()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"kills": -1}, "kills must be an integer >= 0"),
        ({"commits_between_kills": 0}, "commits_between_kills must be"),
        ({"sessions": 0, "new_per_run": 0}, "nothing to run"),
        ({"backend": "curio"}, "backend must be"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, options: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        crash_loop(MACHINE, STATE, path=tmp_path / "agent.db", **options)  # type: ignore[arg-type]


def test_a_child_failing_on_its_own_is_an_error_with_its_output(tmp_path: Path) -> None:
    with pytest.raises(CrashRunFailed, match="broken_state cannot make a state") as caught:
        crash_loop(
            MACHINE,
            "tests.crash_child:broken_state",
            path=tmp_path / "agent.db",
            kills=2,
            durability=Durability.BATCHED,
        )
    assert "RuntimeError" in caught.value.output
