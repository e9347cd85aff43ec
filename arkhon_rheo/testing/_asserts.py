"""Assertion helpers for tests of your own agents (the pytest plugin's, usable anywhere).

Each raises ``AssertionError`` with a message naming every session at fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..supervision import ExitReason

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..protocols import Machine
    from ..system import AgentSystem, SessionResult
    from ._chaos import ChaosReport

__all__ = [
    "assert_all_ended",
    "assert_none_hung",
    "assert_nothing_lost",
    "assert_replay_verifies",
]


def assert_all_ended(
    results: Iterable[SessionResult[Any]],
    exit_reasons: Iterable[ExitReason | str] = (ExitReason.FINISHED, ExitReason.FAILED),
) -> None:
    """Every session ended, with one of ``exit_reasons`` (finished or failed by default)."""
    allowed = {ExitReason(reason) for reason in exit_reasons}
    wrong = [
        f"{result.session_id}: {result.exit_reason.value}"
        + (f" ({result.failure.error_type}: {result.failure.message})" if result.failure else "")
        for result in results
        if result.exit_reason not in allowed
    ]
    names = sorted(reason.value for reason in allowed)
    assert not wrong, f"sessions ended otherwise than {names}: " + "; ".join(wrong)


def assert_none_hung(report: ChaosReport) -> None:
    """No session of a chaos run hung, and none broke an invariant."""
    assert not report.hung, (
        f"{len(report.hung)} session(s) neither committed nor ended within "
        f"{report.hang_after:g} s: {', '.join(report.hung)}"
    )
    assert not report.violations, "invariant violations: " + "; ".join(report.violations)


async def assert_nothing_lost(
    system: AgentSystem, machine: Machine[Any], results: Iterable[SessionResult[Any]]
) -> None:
    """Every commit each session made is in the store: numbered without gaps, folding to its end.

    The store is the session's log, so what the session committed is what its
    stored events fold to: the fold must reach the state the session ended with.
    """
    lost: list[str] = []
    for result in results:
        sid = result.session_id
        seqs = [event.seq for event in await system.stored(machine, sid).history()]
        if seqs != list(range(1, len(seqs) + 1)):
            lost.append(f"{sid}: stored events {seqs} have gaps or repeats")
        folded = (await system.stored(machine, sid).replay()).state
        if folded != result.state:
            lost.append(f"{sid}: the stored events fold to {folded!r}, not {result.state!r}")
    assert not lost, "committed events missing or changed in the store: " + ", ".join(lost)


async def assert_replay_verifies(
    system: AgentSystem,
    machine: Machine[Any],
    session_ids: Iterable[str],
    *,
    reexecute: bool = False,
) -> None:
    """Each session's stored log replays to the states it recorded."""
    diverged = []
    for session_id in session_ids:
        report = await system.stored(machine, session_id).replay(reexecute=reexecute)
        if not report.ok:
            diverged.append(f"{session_id}: {report.divergence}")
    assert not diverged, "replay diverged: " + "; ".join(diverged)
