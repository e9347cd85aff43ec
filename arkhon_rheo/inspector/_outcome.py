"""How a session ended (or where it stands), in one line for the top of its page.

A failed session's reason is its last failure that ended it (the error's
type, class and message, and the event and stage it happened at); a paused
one's, the gate it waits at; a parked one's, the messages it waits for (or
the child session it waits on). The
same grouping of statuses (finished, failed, stuck, running) sorts sessions in
the paths-across-sessions view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..core._seams import WaitsFor
    from ._data import Step

__all__ = ["GROUPS", "Outcome", "group_of", "outcome"]

#: The outcome groups, in the order they are shown.
GROUPS = ("finished", "failed", "stuck", "running")

#: Statuses of sessions that ended without finishing.
_FAILED = frozenset({"failed", "max_steps", "aborted", "cancelled", "crashed", "lease_lost"})
#: Statuses of sessions still running (or owned by a worker).
_RUNNING = frozenset({"running", "created"})


def group_of(status: str) -> str:
    """The outcome group of a stored status: finished, failed, running, else stuck.

    Stuck holds the sessions that stopped without ending: paused at a gate,
    waiting for a message, or any other status a store may keep.
    """
    if status == "finished":
        return "finished"
    if status in _FAILED:
        return "failed"
    if status in _RUNNING:
        return "running"
    return "stuck"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the top of a session's page says about how it ended.

    Attributes:
        status: The session's stored status.
        group: Its outcome group (`group_of`).
        headline: One line: what happened.
        reason: Why (a failure's ``Type (class): message``), or ``""``.
        seq: The event it happened at (0: none to point at).
        stage: The stage it happened in, if any.
        state: The lifecycle state it happened in, if known.
    """

    status: str
    group: str
    headline: str
    reason: str = ""
    seq: int = 0
    stage: str | None = None
    state: str | None = None


def _failure(steps: Sequence[Step]) -> Step | None:
    """The failure that ended the session: the last one with an exit reason, else the last."""
    failed = [step for step in steps if isinstance(step.event.error, dict)]
    ended = [step for step in failed if step.event.error.get("exit_reason")]
    found = ended or failed
    return found[-1] if found else None


def _reason(error: dict[str, Any]) -> str:
    kind = error.get("error_type") or "error"
    klass = error.get("error_class")
    text = f"{kind} ({klass})" if klass else str(kind)
    message = error.get("message")
    return f"{text}: {message}" if message else text


def _last(steps: Sequence[Step], kind: str) -> Step | None:
    return next((step for step in reversed(steps) if step.event.kind == kind), None)


def outcome(status: str, steps: Sequence[Step], waits: WaitsFor | None) -> Outcome:
    """How the session of ``status`` and ``steps`` ended, or where it stands.

    Args:
        status: Its stored status.
        steps: Its timeline's steps, in order.
        waits: What it waits for, if it waits.

    Returns:
        Its outcome, with the reason and the event to point at.
    """
    group, count = group_of(status), len(steps)
    if group == "finished":
        last = steps[-1].event if steps else None
        ended = f" in {last.to_state}" if last is not None else ""
        return Outcome(status, group, f"Finished{ended} after {count} events")
    if group == "failed":
        step = _failure(steps)
        if step is None:
            return Outcome(status, group, f"Ended {status} after {count} events")
        error, event = step.event.error, step.event
        ended = error.get("exit_reason") or status
        return Outcome(
            status,
            group,
            f"Ended {ended}",
            reason=_reason(error),
            seq=event.seq,
            stage=event.stage,
            state=event.from_state,
        )
    if waits is not None and waits.kind == "decision":
        pause = _last(steps, "pause")
        return Outcome(
            status,
            group,
            f"Paused at gate {waits.gate!r}: waits for a human decision",
            reason=f"the gate guards stage {waits.stage!r}" if waits.stage else "",
            seq=pause.event.seq if pause is not None else 0,
            stage=waits.stage,
        )
    if waits is not None and waits.kind == "child":
        return Outcome(
            status,
            group,
            "Waits for its child session to end",
            reason=waits.describe(),
            stage=waits.stage,
        )
    if waits is not None:
        kinds = ", ".join(waits.accepts) or "any kind"
        return Outcome(
            status,
            group,
            "Waits for a message",
            reason=f"accepts {kinds}",
            stage=waits.stage,
        )
    headline = "Running" if group == "running" else f"Stopped ({status})"
    return Outcome(status, group, f"{headline} after {count} events")
