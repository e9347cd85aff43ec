"""`chaos_run`: many sessions of one machine under a `FaultPlan`, and the `ChaosReport`.

Every session is watched: one that neither commits nor ends within
``hang_after`` seconds is counted hung (and cancelled, so the run ends).
Each ended session is checked: it ended in a terminal state with a legal exit
reason, its events are numbered without gaps, its final state holds the
machine's invariants (unless it failed), a failure carries its record, and
the checks you pass hold. A healthy run has no hung sessions and no
violations (`ChaosReport.ok`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._errors import ConfigurationError, RestartIntensityExceeded
from ..protocols import AgentState, Machine
from ..supervision import ExitReason
from ..system import AgentSystem
from ._fault_rules import FaultKind

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ..protocols import TransitionEvent
    from ..system import SessionHandle, SessionResult
    from ._faults import FaultPlan

__all__ = ["ChaosReport", "chaos_run", "fault_class"]

S = TypeVar("S", bound=AgentState)

#: Exit reasons a session under faults may end with; anything else is a violation.
_LEGAL = frozenset({ExitReason.FINISHED, ExitReason.FAILED, ExitReason.MAX_STEPS})

#: The fault class of each kind, by what the supervisor does with it.
_CLASS: dict[FaultKind, str] = {
    FaultKind.TRANSIENT: "transient",
    FaultKind.RATE_LIMITED: "transient",
    FaultKind.TOOL_TIMEOUT: "transient",
    FaultKind.LATENCY: "latency",
    FaultKind.RECOVERABLE: "recoverable",
    FaultKind.MALFORMED_REPLY: "recoverable",
    FaultKind.TRUNCATED_REPLY: "recoverable",
    FaultKind.ERROR: "recoverable",
    FaultKind.FATAL: "fatal",
    FaultKind.DISK_FULL: "fatal",
    FaultKind.DATABASE_LOCKED: "fatal",
    FaultKind.HANG: "hang",
}
_SEVERITY = ["none", "latency", "transient", "recoverable", "fatal", "hang"]


def fault_class(kinds: Iterable[FaultKind]) -> str:
    """The most severe class among ``kinds``: ``"none"``, ``"latency"``, ``"transient"``,
    ``"recoverable"``, ``"fatal"`` or ``"hang"``.

    ``ERROR`` counts as recoverable (the default class of an unclassified
    exception) and a store failure as fatal (the classifier's default).
    """  # noqa: D205
    worst = 0
    for kind in kinds:
        worst = max(worst, _SEVERITY.index(_CLASS[kind]))
    return _SEVERITY[worst]


@dataclass(frozen=True, slots=True)
class ChaosReport:
    """What a chaos run found.

    Attributes:
        sessions: How many sessions ran.
        outcomes: Sessions per exit reason (``"finished"``, ``"failed"``, ...).
        retries: Transient retries, all sessions together.
        restarts: Stage restarts, all sessions together.
        escalations: Sessions failed because restarts exceeded the restart intensity.
        hung: The ids of sessions that neither committed nor ended within the bound.
        violations: What broke an invariant of the run, one line each.
        faults: Faults injected per target, per kind.
        by_fault_class: For each session's most severe fault class, its sessions
            per exit reason (``{"fatal": {"failed": 12}, "none": {"finished": 80}}``).
        hang_after: The bound, in seconds.
    """

    sessions: int
    outcomes: dict[str, int]
    retries: int
    restarts: int
    escalations: int
    hung: tuple[str, ...]
    violations: tuple[str, ...]
    faults: dict[str, dict[str, int]]
    by_fault_class: dict[str, dict[str, int]]
    hang_after: float

    @property
    def ok(self) -> bool:
        """No session hung and nothing broke an invariant."""
        return not self.hung and not self.violations

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON data."""
        return {
            "sessions": self.sessions,
            "outcomes": dict(self.outcomes),
            "retries": self.retries,
            "restarts": self.restarts,
            "escalations": self.escalations,
            "hung": list(self.hung),
            "violations": list(self.violations),
            "faults": {target: dict(kinds) for target, kinds in self.faults.items()},
            "by_fault_class": {k: dict(v) for k, v in self.by_fault_class.items()},
            "hang_after": self.hang_after,
            "ok": self.ok,
        }

    def to_json(self, **options: Any) -> str:
        """The report as JSON text (``options`` go to ``json.dumps``, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), sort_keys=True, **options)

    def table(self) -> str:
        """The report as a plain-text table."""
        rows: list[tuple[str, str]] = [
            ("sessions", str(self.sessions)),
            *((f"exit: {reason}", str(n)) for reason, n in sorted(self.outcomes.items())),
            ("retries", str(self.retries)),
            ("restarts", str(self.restarts)),
            ("escalations", str(self.escalations)),
            (f"hung (> {self.hang_after:g} s)", str(len(self.hung))),
            ("invariant violations", str(len(self.violations))),
        ]
        for target, kinds in sorted(self.faults.items()):
            for kind, n in sorted(kinds.items()):
                rows.append((f"fault: {target} {kind}", str(n)))
        for cls, reasons in sorted(self.by_fault_class.items()):
            spread = ", ".join(f"{r} {n}" for r, n in sorted(reasons.items()))
            rows.append((f"worst fault {cls}", spread))
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
        lines.extend(f"  ! {line}" for line in self.violations)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


async def chaos_run(
    machine: Machine[S],
    make_state: Callable[[int], S],
    *,
    sessions: int,
    plan: FaultPlan,
    system: AgentSystem | None = None,
    hang_after: float = 60.0,
    check: Callable[[SessionResult[S]], str | None] | None = None,
    verify_replay: bool = False,
    session_id: Callable[[int], str] = "chaos-{}".format,
    **system_options: Any,
) -> ChaosReport:
    """Run ``sessions`` sessions of ``machine`` under ``plan`` and report how they ended.

    Session ``i`` starts from ``make_state(i)`` with the id ``session_id(i)``
    (``"chaos-<i>"``), so a seeded plan faults the same calls on every run and
    backend. The plan is installed for the sessions only.

    Args:
        machine: Your machine.
        make_state: The initial state of session ``i``.
        sessions: How many sessions run, all at once.
        plan: The faults to inject.
        system: A running `AgentSystem` to run them in; without one, an in-memory
            system (``path=None``) is opened with ``system_options`` for the run.
        hang_after: A session that neither commits nor ends within this many
            seconds counts as hung, and is cancelled.
        check: Your own check of each ended session: a message if something is
            wrong (a violation), ``None`` if not.
        verify_replay: Also replay each session's stored log and count a
            divergence as a violation (needs a system with a store).
        session_id: The id of session ``i``.
        **system_options: Passed to `AgentSystem` when ``system`` is not given.

    Returns:
        The `ChaosReport`.

    Raises:
        ConfigurationError: If ``sessions`` or ``hang_after`` is out of range, or
            ``verify_replay`` is asked of a system without a store.
    """
    if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
        raise ConfigurationError(f"sessions must be a positive integer, got {sessions!r}")
    if not (isinstance(hang_after, int | float) and hang_after > 0 and math.isfinite(hang_after)):
        raise ConfigurationError(f"hang_after must be positive seconds, got {hang_after!r}")
    if system is None:
        system_options.setdefault("path", None)
        async with AgentSystem(**system_options) as own:
            return await _run(
                own, machine, make_state, sessions, plan, hang_after, check, verify_replay,
                session_id,
            )  # fmt: skip
    if system_options:
        raise ConfigurationError(
            f"system options {sorted(system_options)} apply only when chaos_run opens the "
            "system; set them on the AgentSystem you pass"
        )
    return await _run(
        system, machine, make_state, sessions, plan, hang_after, check, verify_replay, session_id
    )


async def _run(
    system: AgentSystem,
    machine: Machine[S],
    make_state: Callable[[int], S],
    sessions: int,
    plan: FaultPlan,
    hang_after: float,
    check: Callable[[SessionResult[S]], str | None] | None,
    verify_replay: bool,
    session_id: Callable[[int], str],
) -> ChaosReport:
    if verify_replay and system.store is None:
        raise ConfigurationError("verify_replay needs a system with a store (path= or store=)")
    results: list[SessionResult[S]] = []
    hung: list[str] = []
    violations: list[str] = []

    async def watch(handle: SessionHandle[S]) -> None:
        events = handle.events()
        try:
            while True:
                with anyio.move_on_after(hang_after) as scope:
                    event = await anext(events, None)
                if scope.cancelled_caught:
                    hung.append(handle.session_id)
                    handle.cancel()
                    break
                if event is None:
                    break
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        result = await handle.result()
        results.append(result)
        history = await handle.history()
        violations.extend(_violations(machine, history, result, check))
        if verify_replay and handle.session_id not in hung:
            report = await system.stored(machine, handle.session_id).replay()
            if not report.ok:
                violations.append(f"{handle.session_id}: replay diverged: {report.divergence}")

    with plan.installed():
        handles = [
            await system.start(machine, make_state(i), session_id=session_id(i))
            for i in range(sessions)
        ]
    async with anyio.create_task_group() as group:
        for handle in handles:
            group.start_soon(watch, handle)

    worst: dict[str | None, list[FaultKind]] = {}
    for fault in plan.injected:
        worst.setdefault(fault.session_id, []).append(fault.kind)
    by_class: dict[str, Counter[str]] = {}
    for result in results:
        cls = fault_class(worst.get(result.session_id, ()))
        by_class.setdefault(cls, Counter())[result.exit_reason.value] += 1
    return ChaosReport(
        sessions=sessions,
        outcomes=dict(Counter(result.exit_reason.value for result in results)),
        retries=sum(result.retries for result in results),
        restarts=sum(result.restarts for result in results),
        escalations=sum(
            result.failure is not None
            and f"[{RestartIntensityExceeded.NOTE}: " in result.failure.message
            for result in results
        ),
        hung=tuple(sorted(hung)),
        violations=tuple(violations),
        faults=plan.counts(),
        by_fault_class={cls: dict(counts) for cls, counts in sorted(by_class.items())},
        hang_after=float(hang_after),
    )


def _violations(
    machine: Machine[S],
    history: Sequence[TransitionEvent],
    result: SessionResult[S],
    check: Callable[[SessionResult[S]], str | None] | None,
) -> list[str]:
    """What is wrong with how this session ended."""
    sid = result.session_id
    found: list[str] = []
    if result.exit_reason not in _LEGAL and result.exit_reason is not ExitReason.CANCELLED:
        found.append(f"{sid}: ended {result.exit_reason.value}")
    state = result.state
    if result.exit_reason in _LEGAL and not machine.is_terminal(state.lifecycle):
        found.append(f"{sid}: ended {result.exit_reason.value} in non-terminal state")
    failed = state.lifecycle is machine.failed
    if failed and result.failure is None:
        found.append(f"{sid}: failed without a failure record")
    if not failed and result.exit_reason is ExitReason.FINISHED:
        for condition in machine.invariants_of(state.lifecycle):
            try:
                holds = condition.holds(state)
            except Exception as exc:
                found.append(f"{sid}: invariant {condition.name} raised {exc!r}")
                continue
            if not holds:
                found.append(f"{sid}: invariant {condition.name} does not hold at the end")
    seqs = [event.seq for event in history]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))) if seqs else False:
        found.append(f"{sid}: event numbers have gaps or repeats: {seqs}")
    if check is not None:
        try:
            problem = check(result)
        except Exception as exc:
            problem = f"the check raised {exc!r}"
        if problem:
            found.append(f"{sid}: {problem}")
    return found
