"""Metrics fed by committed events and watched systems, and their Prometheus text."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem, Backoff, ConfigurationError
from arkhon_rheo.observe import (
    METRICS,
    Histogram,
    MetricFamily,
    Metrics,
    PrometheusCollector,
    Sample,
    prometheus_text,
)
from tests.support.observe_machine import OUTCOMES, Flow, flow_machine, troubled

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh_outcomes() -> None:
    OUTCOMES.clear()


async def _run(metrics: Metrics, path: Path) -> None:
    """One troubled session that finishes, one that pauses at its gate, on a SQLite file."""
    troubled()
    backoff = Backoff(base=0, cap=0, max_attempts=3)
    async with AgentSystem(
        path=path / "m.db", backoff=backoff, listeners=[metrics], keep_ended=10
    ) as system:
        metrics.watch(system)
        assert (await system.run(flow_machine(), Flow(), session_id="ok")).ok
        await system.run(flow_machine(gate=True), Flow(), session_id="held")
        families = {family.name: family for family in metrics.collect()}
    _check(families)


def _values(family: MetricFamily) -> dict[tuple[tuple[str, str], ...], float]:
    return {s.labels: s.value for s in family.samples if isinstance(s, Sample)}


def _check(families: dict[str, MetricFamily]) -> None:
    assert list(families) == [name for name, *_ in METRICS]
    assert _values(families["react_steps_total"]) == {
        (("stage", "begin"),): 2,
        (("stage", "work"),): 1,
    }
    assert _values(families["arkhon_retries_total"]) == {(("stage", "work"),): 1}
    assert _values(families["arkhon_restarts_total"]) == {(("stage", "work"),): 1}
    assert _values(families["arkhon_failures_total"]) == {
        (("stage", "work"), ("error_class", "recoverable"), ("error_type", "Recoverable")): 1
    }
    assert _values(families["arkhon_pauses_total"]) == {(("gate", "review"),): 1}
    transitions = _values(families["arkhon_transitions_total"])
    assert transitions[(("kind", "step"), ("from_state", "start"), ("to_state", "work"))] == 2
    assert transitions[(("kind", "pause"), ("from_state", "work"), ("to_state", "work"))] == 1
    assert set(_values(families["arkhon_state_seconds_total"])) == {
        (("state", "start"),),
        (("state", "work"),),
    }
    (work,) = [s for s in families["node_latency_seconds"].samples if s.labels[0][1] == "work"]
    assert isinstance(work, Histogram)
    assert work.count == 1
    assert work.buckets[-1] == (float("inf"), 1)
    assert [count for _, count in work.buckets] == sorted(count for _, count in work.buckets)
    (writes,) = families["arkhon_store_write_seconds"].samples
    assert isinstance(writes, Histogram)
    assert writes.count == 3  # every step went through the store before it counted
    assert _values(families["arkhon_sessions"]) == {
        (("status", "finished"),): 1,
        (("status", "paused"),): 1,
    }
    assert _values(families["arkhon_mailbox_queued"]) == {(): 0}
    stored = _values(families["arkhon_store_events_total"])[()]
    transactions = _values(families["arkhon_store_transactions_total"])[()]
    assert stored >= 5  # 3 events of the first session (a failure among them), 2 of the second
    assert transactions >= 1  # appends, and also session records, statuses, leases
    assert _values(families["arkhon_store_largest_batch"])[()] >= 1


async def test_metrics_count_steps_retries_restarts_pauses_and_sessions(tmp_path: Path) -> None:
    await _run(Metrics(), tmp_path)


async def test_the_prometheus_text_after_a_run(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client", reason="the `metrics` extra is not installed")
    metrics = Metrics()
    await _run(metrics, tmp_path)
    text = prometheus_text(metrics)
    for line in (
        "# TYPE react_steps_total counter",
        'react_steps_total{stage="work"} 1.0',
        "# TYPE node_latency_seconds histogram",
        'node_latency_seconds_bucket{le="+Inf",stage="work"} 1.0',
        'node_latency_seconds_count{stage="begin"} 2.0',
        'arkhon_retries_total{stage="work"} 1.0',
        'arkhon_restarts_total{stage="work"} 1.0',
        'arkhon_pauses_total{gate="review"} 1.0',
        'arkhon_sessions{status="finished"} 1.0',
        'arkhon_sessions{status="paused"} 1.0',
        "arkhon_mailbox_queued 0.0",
        'arkhon_transitions_total{from_state="start",kind="step",to_state="work"} 2.0',
    ):
        assert line in text.splitlines(), f"{line!r} missing from:\n{text}"
    assert "# HELP node_latency_seconds Seconds from a stage step's start to its commit" in text


def test_the_collector_registers_on_a_registry() -> None:
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="the `metrics` extra is not installed"
    )
    metrics = Metrics()
    registry = prometheus_client.CollectorRegistry()
    registry.register(PrometheusCollector(metrics))
    # No run, no watched system: the families are there, without series.
    assert registry.get_sample_value("arkhon_actors") is None
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE react_steps_total counter" in text


def test_without_prometheus_client_the_exporter_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'arkhon-rheo\[metrics\]'"):
        prometheus_text(Metrics())


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (0.1, 0.1), ("soon",)])
def test_bad_buckets_are_refused(buckets: tuple[object, ...]) -> None:
    with pytest.raises(ConfigurationError, match="increasing upper bounds"):
        Metrics(buckets=buckets)  # type: ignore[arg-type]
