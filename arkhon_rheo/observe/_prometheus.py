"""The Prometheus exporter of `Metrics` (``pip install 'arkhon-rheo[metrics]'``).

`PrometheusCollector` is a ``prometheus_client`` collector: register it on a
registry (``registry.register(PrometheusCollector(metrics))``) and the families
of `METRICS` are read from the `Metrics` at each scrape. `prometheus_text`
renders them in the text exposition format, for a test or an endpoint of your own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ._metrics import Histogram

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._metrics import Metrics

__all__ = ["PrometheusCollector", "prometheus_text"]


def _client() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as exc:
        raise ConfigurationError(
            "the Prometheus exporter needs prometheus-client: pip install 'arkhon-rheo[metrics]'"
        ) from exc
    return prometheus_client


class PrometheusCollector:
    """A ``prometheus_client`` collector reading a `Metrics` at each scrape.

    Args:
        metrics: The metrics to export.

    Raises:
        ConfigurationError: If prometheus-client is not installed.
    """

    def __init__(self, metrics: Metrics) -> None:
        self._core = _client().core
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        """Yield each family of `METRICS` as a ``prometheus_client`` metric family."""
        core = self._core
        for family in self._metrics.collect():
            labels = list(family.labels)
            if family.kind == "histogram":
                out = core.HistogramMetricFamily(family.name, family.help, labels=labels)
            elif family.kind == "counter":
                out = core.CounterMetricFamily(family.name, family.help, labels=labels)
            else:
                out = core.GaugeMetricFamily(family.name, family.help, labels=labels)
            for series in family.samples:
                values = [value for _, value in series.labels]
                if isinstance(series, Histogram):
                    buckets = [(_bound(bound), count) for bound, count in series.buckets]
                    out.add_metric(values, buckets, series.sum)
                else:
                    out.add_metric(values, series.value)
            yield out


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def prometheus_text(metrics: Metrics) -> str:
    """``metrics`` in Prometheus' text exposition format.

    Raises:
        ConfigurationError: If prometheus-client is not installed.
    """
    client = _client()
    registry = client.CollectorRegistry()
    registry.register(PrometheusCollector(metrics))
    text: bytes = client.generate_latest(registry)
    return text.decode()
