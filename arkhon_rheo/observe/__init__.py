"""Metrics of the runtime, and their Prometheus exporter.

`Metrics` counts what sessions commit (steps, latencies, moves, retries,
restarts, failures, pauses) and reads the statistics of the systems it
watches (sessions by status, actors, mailbox depth, store batches) when
collected. `prometheus_text` and `PrometheusCollector` export it; they need
the ``metrics`` extra (prometheus-client). Logs: `arkhon_rheo.configure_logging`;
traces: install the ``otel`` extra (see the docs' "Logs, metrics and traces").
"""

from __future__ import annotations

from .._exports import publish
from ._metrics import METRICS as METRICS
from ._metrics import Histogram as Histogram
from ._metrics import MetricFamily as MetricFamily
from ._metrics import Metrics as Metrics
from ._metrics import Sample as Sample
from ._prometheus import PrometheusCollector as PrometheusCollector
from ._prometheus import prometheus_text as prometheus_text

__all__ = [
    "METRICS",
    "Histogram",
    "MetricFamily",
    "Metrics",
    "PrometheusCollector",
    "Sample",
    "prometheus_text",
]

publish(__name__, __all__, globals())
del publish
