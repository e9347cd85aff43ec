"""`Metrics`: counters and histograms of a runtime, fed by its events, with no dependency.

A `Metrics` is an event listener: pass it to `AgentSystem` (``listeners=[metrics]``)
and every committed event updates a few counters (a dictionary update each;
nothing else runs on the commit path). `Metrics.watch` adds a system whose
`AgentSystem.statistics` and store statistics are read when the metrics are
collected, never before. `Metrics.collect` returns every family as plain
records; `arkhon_rheo.observe.prometheus_text` renders them for Prometheus.

The families (`METRICS` lists them; labels in braces):

=================================  =========  ===============================================
``react_steps_total``              counter    stage steps committed {stage}
``node_latency_seconds``           histogram  a stage step, start to commit, retries and
                                              their backoff included {stage}
``arkhon_state_seconds_total``     counter    time spent running each state's stage {state}
``arkhon_transitions_total``       counter    committed events {kind, from_state, to_state}
``arkhon_retries_total``           counter    retries of transient failures {stage}
``arkhon_restarts_total``          counter    stage restarts after recoverable failures {stage}
``arkhon_failures_total``          counter    failures recorded {stage, error_class, error_type}
``arkhon_pauses_total``            counter    pauses at a human gate {gate}
``arkhon_store_write_seconds``     histogram  a step's write-ahead store write, until commit
``arkhon_sessions``                gauge      sessions held, by status {status}
``arkhon_actors``                  gauge      actors alive
``arkhon_mailbox_queued``          gauge      messages waiting in session supervisors' mailboxes
``arkhon_dead_letters_total``      counter    messages that reached no actor
``arkhon_store_events_total``      counter    events appended to the store
``arkhon_store_transactions_total`` counter   store write transactions (appends, and session
                                              records, statuses and leases)
``arkhon_store_largest_batch``     gauge      the most events one store transaction carried
``arkhon_store_pending``           gauge      events accepted but not yet durable
=================================  =========  ===============================================

The last eight come from watched systems (summed over them).
"""

from __future__ import annotations

import bisect
import enum
import itertools
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigurationError
from ..protocols import ErrorClass, EventKind

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..protocols import TransitionEvent
    from ..system import AgentSystem

__all__ = ["METRICS", "Histogram", "MetricFamily", "Metrics", "Sample"]

#: Prometheus' default histogram bounds, in seconds.
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of a counter or gauge, with its labels (``(("stage", "think"),)``)."""

    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class Histogram:
    """One histogram series: counts per upper bound (cumulative), their sum and count.

    Attributes:
        labels: The series' labels.
        buckets: ``(upper_bound, observations <= it)`` pairs, ending with ``inf``.
        sum: The sum of the observations.
        count: How many there were.
    """

    labels: tuple[tuple[str, str], ...]
    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int


@dataclass(frozen=True, slots=True)
class MetricFamily:
    """A metric as collected: its name, kind, help text and series."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    samples: tuple[Sample | Histogram, ...]


#: Every family `Metrics.collect` returns: name, kind, labels, help.
METRICS: tuple[tuple[str, Kind, tuple[str, ...], str], ...] = (
    ("react_steps_total", "counter", ("stage",), "Stage steps committed"),
    (
        "node_latency_seconds",
        "histogram",
        ("stage",),
        "Seconds from a stage step's start to its commit, retries included",
    ),
    (
        "arkhon_state_seconds_total",
        "counter",
        ("state",),
        "Seconds spent running the stage of each state",
    ),
    (
        "arkhon_transitions_total",
        "counter",
        ("kind", "from_state", "to_state"),
        "Events committed, by kind and move",
    ),
    ("arkhon_retries_total", "counter", ("stage",), "Retries of transient stage failures"),
    ("arkhon_restarts_total", "counter", ("stage",), "Stage restarts after recoverable failures"),
    (
        "arkhon_failures_total",
        "counter",
        ("stage", "error_class", "error_type"),
        "Failures recorded by supervisors",
    ),
    ("arkhon_pauses_total", "counter", ("gate",), "Pauses at a human gate"),
    (
        "arkhon_store_write_seconds",
        "histogram",
        (),
        "Seconds from a step's end to its commit: the write-ahead store write",
    ),
    ("arkhon_sessions", "gauge", ("status",), "Sessions held by watched systems, by status"),
    ("arkhon_actors", "gauge", (), "Actors alive in watched systems"),
    (
        "arkhon_mailbox_queued",
        "gauge",
        (),
        "Messages waiting in the mailboxes of session supervisors",
    ),
    ("arkhon_dead_letters_total", "counter", (), "Messages that reached no actor"),
    ("arkhon_store_events_total", "counter", (), "Events appended to the stores"),
    (
        "arkhon_store_transactions_total",
        "counter",
        (),
        "Store write transactions committed (appends, session records, statuses, leases)",
    ),
    ("arkhon_store_largest_batch", "gauge", (), "The most events one store transaction carried"),
    ("arkhon_store_pending", "gauge", (), "Events accepted by the stores but not yet durable"),
)


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        return str(value.value) if isinstance(value.value, str) else value.name
    return str(value)


class _Series:
    """The observations of one histogram series (counts per bucket, not cumulative)."""

    __slots__ = ("count", "counts", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.sum = 0.0
        self.count = 0


class Metrics:
    """Counters and histograms of sessions, fed by their events (see the module docstring).

    ::

        metrics = Metrics()
        async with AgentSystem(listeners=[metrics]) as system:
            metrics.watch(system)

    Args:
        buckets: The upper bounds of the histograms, in seconds, increasing.

    Raises:
        ConfigurationError: If ``buckets`` is empty or not increasing.
    """

    def __init__(self, *, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        try:
            bounds = tuple(float(b) for b in buckets)
        except (TypeError, ValueError):
            bounds = ()
        if not bounds or any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ConfigurationError(
                f"Metrics(buckets=...) needs increasing upper bounds, got {tuple(buckets)!r}"
            )
        self._bounds = bounds
        self._counters: dict[str, dict[tuple[str, ...], float]] = {
            name: {} for name, kind, _, _ in METRICS if kind == "counter"
        }
        self._histograms: dict[str, dict[tuple[str, ...], _Series]] = {
            "node_latency_seconds": {},
            "arkhon_store_write_seconds": {},
        }
        self._systems: weakref.WeakSet[AgentSystem] = weakref.WeakSet()

    # -- feeding -------------------------------------------------------------------

    def __call__(self, event: TransitionEvent) -> None:
        """Count one committed event (`AgentSystem` calls this as a listener)."""
        kind = event.kind
        stage = event.stage or ""
        move = (kind.value, _label(event.from_state), _label(event.to_state))
        self._add("arkhon_transitions_total", move)
        if event.attempt > 1:
            self._add("arkhon_retries_total", (stage,), event.attempt - 1)
        if kind is EventKind.STEP:
            took = max(event.finished_at - event.started_at, 0.0)
            self._add("react_steps_total", (stage,))
            self._add("arkhon_state_seconds_total", (move[1],), took)
            self._observe("node_latency_seconds", (stage,), took)
            self._observe("arkhon_store_write_seconds", (), max(time.time() - event.finished_at, 0))
        elif kind is EventKind.FAILURE and event.error is not None:
            error = event.error
            error_class = error.error_class
            self._add("arkhon_failures_total", (stage, error_class.value, error.error_type))
            if error_class is ErrorClass.RECOVERABLE:
                self._add("arkhon_restarts_total", (stage,))
        elif kind is EventKind.PAUSE:
            gate = (event.info or {}).get("gate", "")
            self._add("arkhon_pauses_total", (str(gate),))

    def _add(self, name: str, key: tuple[str, ...], amount: float = 1) -> None:
        series = self._counters[name]
        series[key] = series.get(key, 0) + amount

    def _observe(self, name: str, key: tuple[str, ...], value: float) -> None:
        family = self._histograms[name]
        series = family.get(key)
        if series is None:
            series = family[key] = _Series(len(self._bounds) + 1)
        series.counts[bisect.bisect_left(self._bounds, value)] += 1
        series.sum += value
        series.count += 1

    def watch(self, system: AgentSystem) -> None:
        """Read ``system``'s statistics (and its store's) whenever the metrics are collected.

        Held weakly: a system that is gone drops out.
        """
        self._systems.add(system)

    # -- reading -------------------------------------------------------------------

    def collect(self) -> list[MetricFamily]:
        """Every family in `METRICS`, as it stands now (watched systems read now)."""
        gauges = self._read_systems()
        families = []
        for name, kind, labels, text in METRICS:
            samples: tuple[Sample | Histogram, ...]
            if kind == "histogram":
                samples = tuple(
                    self._histogram(labels, key, series)
                    for key, series in sorted(self._histograms[name].items())
                )
            else:
                values = gauges.get(name)
                if values is None:
                    values = self._counters[name]
                samples = tuple(
                    Sample(tuple(zip(labels, key, strict=True)), value)
                    for key, value in sorted(values.items())
                )
            families.append(MetricFamily(name, kind, text, labels, samples))
        return families

    def _histogram(
        self, labels: tuple[str, ...], key: tuple[str, ...], series: _Series
    ) -> Histogram:
        running = 0
        buckets = []
        for bound, count in zip((*self._bounds, float("inf")), series.counts, strict=True):
            running += count
            buckets.append((bound, running))
        return Histogram(
            tuple(zip(labels, key, strict=True)), tuple(buckets), series.sum, series.count
        )

    def _read_systems(self) -> dict[str, dict[tuple[str, ...], float]]:
        statuses: dict[tuple[str, ...], float] = {}
        totals = dict.fromkeys(
            (
                "arkhon_actors",
                "arkhon_mailbox_queued",
                "arkhon_dead_letters_total",
                "arkhon_store_events_total",
                "arkhon_store_transactions_total",
                "arkhon_store_largest_batch",
                "arkhon_store_pending",
            ),
            0,
        )
        for system in list(self._systems):
            stats = system.statistics()
            for status, count in stats.statuses.items():
                statuses[(status,)] = statuses.get((status,), 0) + count
            totals["arkhon_actors"] += stats.actors
            totals["arkhon_mailbox_queued"] += stats.queued
            totals["arkhon_dead_letters_total"] += stats.dead_letters
            store = system.store
            if store is not None:
                stored = store.statistics()
                totals["arkhon_store_events_total"] += stored.appended
                totals["arkhon_store_transactions_total"] += stored.transactions
                totals["arkhon_store_largest_batch"] = max(
                    totals["arkhon_store_largest_batch"], stored.largest_batch
                )
                totals["arkhon_store_pending"] += stored.pending
        read: dict[str, dict[tuple[str, ...], float]] = {"arkhon_sessions": statuses}
        for name, value in totals.items():
            read[name] = {(): value} if self._systems else {}
        return read
