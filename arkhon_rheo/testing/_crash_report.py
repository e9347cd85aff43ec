"""What a `crash_loop` found: `CrashReport` and its `LostCommit` entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..system import ReplayReport

__all__ = ["CrashReport", "LostCommit"]


@dataclass(frozen=True, slots=True)
class LostCommit:
    """A commit the child was told was stored, which the store does not have.

    Attributes:
        session_id: The session.
        acknowledged: The highest event number acknowledged (0: its creation).
        stored: The session's last stored event number (``None``: no such session).
    """

    session_id: str
    acknowledged: int
    stored: int | None


@dataclass(frozen=True, slots=True)
class CrashReport:
    """What a `crash_loop` did and found.

    Attributes:
        kills: SIGKILLs sent to a running child.
        runs: Child processes started (the last one ran undisturbed).
        acknowledged: Commits (and session creations) the children reported
            as acknowledged by the store, over all runs.
        lost: Acknowledged commits missing from the store at some check: must
            be empty in `Durability.SYNC` (and `Durability.BATCHED`, whose
            acknowledgement also waits for the disk).
        integrity: Problems ``PRAGMA integrity_check`` reported at some check
            (empty: ``ok`` every time).
        checks: How many times the file was checked (after each run).
        replays: Each session's `ReplayReport` after the last run.
        unfinished: Sessions not in a terminal state after the last run.
        failed: ``"<session id> <exit reason>"`` for sessions that ended badly.
    """

    kills: int
    runs: int
    acknowledged: int
    lost: tuple[LostCommit, ...]
    integrity: tuple[str, ...]
    checks: int
    replays: Mapping[str, ReplayReport[Any]]
    unfinished: tuple[str, ...]
    failed: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Nothing lost, the file always sound, every session ended well and replays."""
        return not (self.lost or self.integrity or self.unfinished or self.failed) and all(
            report.ok for report in self.replays.values()
        )

    @property
    def diverged(self) -> dict[str, str]:
        """The sessions whose replay does not fit their log, with the reason."""
        return {
            session_id: str(report.divergence)
            for session_id, report in self.replays.items()
            if report.divergence is not None
        }

    def summary(self) -> str:
        """One line per finding, for a test's failure message or a log."""
        lines = [
            f"{self.kills} kills over {self.runs} runs, {self.acknowledged} acknowledged "
            f"commits, {len(self.lost)} lost, {self.checks} integrity checks "
            f"({len(self.integrity)} failed), {len(self.replays)} sessions replayed "
            f"({len(self.diverged)} diverged), {len(self.unfinished)} unfinished, "
            f"{len(self.failed)} failed"
        ]
        lines += [
            f"lost: {lost.session_id} acknowledged #{lost.acknowledged}, stored "
            f"{'nothing' if lost.stored is None else f'up to #{lost.stored}'}"
            for lost in self.lost
        ]
        lines += [f"integrity: {problem}" for problem in self.integrity]
        lines += [f"diverged: {sid}: {why}" for sid, why in self.diverged.items()]
        lines += [f"unfinished: {sid}" for sid in self.unfinished]
        lines += [f"failed: {line}" for line in self.failed]
        return "\n".join(lines)
