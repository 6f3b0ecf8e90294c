"""What the server exports on /metrics, and a PromQL reader that checks an expression against it.

The series and their label names come from the metric declarations (the registry of
``turbotts/server/ops/metrics.py``), not from a scrape: a counter that has not fired (rate limits,
admission rejections, Redis outages) has no sample to show its labels, yet they are fixed when it is
declared. The reader checks the metric names, the label matchers, the labels an expression groups by
(``by``/``without``), matches on (``on``/``ignoring``/``group_left``) or reads (``label_replace``), each
against the labels the series under it carry: a renamed metric or label breaks these tests instead of a
panel going blank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.promql import Labels, Reader
from tests.deploy.promtool import ALERTS
from turbotts.cache.tiered import TieredCacheStats
from turbotts.server.ops.metrics import GuardStats, Metrics

#: Metrics another change in flight will export, that a dashboard may use first (their labels are not known).
PENDING_METRICS: frozenset[str] = frozenset()
#: Labels Prometheus adds at scrape time.
SCRAPE_LABELS = frozenset({"job", "instance"})
#: The series of each metric type (as PromQL sees them), with the labels each adds.
_SERIES: dict[str, dict[str, tuple[str, ...]]] = {
    "counter": {"_total": (), "_created": ()}, "gauge": {"": ()}, "info": {"_info": ()},
    "histogram": {"_bucket": ("le",), "_count": (), "_sum": (), "_created": ()},
    "summary": {"": ("quantile",), "_count": (), "_sum": (), "_created": ()},
}  # fmt: skip
_NAME = re.compile(r"\bturbotts[a-z0-9_:]*")


@dataclass(frozen=True)
class Exported:
    """Series names (as PromQL sees them) and the label names each may carry (None: not known)."""

    labels: Mapping[str, Labels]

    @classmethod
    def declared(cls) -> Exported:
        """Every series the server's metrics registry declares, whether or not it has a sample yet, with the
        labels it is declared with and those Prometheus adds when it scrapes."""
        metrics = Metrics()
        metrics.guards.source = lambda: GuardStats(TieredCacheStats(0, 0, 0, 0, 0, 0, 0), 0, 0)
        wrapped = {m._name: m._labelnames for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)}
        labels: dict[str, frozenset[str]] = {}
        for family in metrics.registry.collect():
            names = set(wrapped.get(family.name, getattr(family, "_labelnames", ())))
            for suffix, extra in _SERIES.get(family.type, {"": ()}).items():
                labels[family.name + suffix] = frozenset(names.union(extra, SCRAPE_LABELS))
            for sample in family.samples:
                labels[sample.name] = labels.get(sample.name, frozenset()) | set(sample.labels)
        return cls(labels)

    @classmethod
    def parse(cls, text: str) -> Exported:
        """The series of one exposition (a scrape) and the labels its samples carry."""
        labels: dict[str, frozenset[str]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels[sample.name] = labels.get(sample.name, frozenset()) | set(sample.labels)
        return cls(labels)

    def with_series(self, more: Mapping[str, Labels]) -> Exported:
        return Exported({**self.labels, **more})

    def with_labels(self, added: Iterable[str]) -> Exported:
        """Every series also labelled ``added`` (the fleet endpoint labels each sample with its replica)."""
        return Exported({name: None if have is None else have | set(added) for name, have in self.labels.items()})


def with_recording_rules(exported: Exported, path: Path = ALERTS) -> Exported:
    """``exported`` and the series recorded by the rule file, each with the labels its expression keeps."""
    labels = dict(exported.labels)
    for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                labels[rule["record"]] = labels_of(rule["expr"], Exported(labels))
    return Exported(labels)


def metric_names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def labels_of(expr: str, exported: Exported) -> Labels:
    """The label names the series of ``expr`` may carry (what a legend or an alert's ``$labels`` can show)."""
    return Reader(expr, exported.labels).read().labels


def problems(expr: str, exported: Exported) -> list[str]:
    """What in ``expr`` the server does not export: unknown metrics, or labels no series under them has.

    Grafana's ``label_values(selector, label)`` (a variable's query) is read as the selector and a label of it.
    """
    if match := re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", expr, re.DOTALL):
        expr, label = match.groups()
        reader = Reader(expr, exported.labels)
        reader.need([label], reader.read().labels, "label_values")
    else:
        reader = Reader(expr, exported.labels)
        reader.read()
    if not metric_names(expr):
        reader.problems.append("no turbotts metric in the expression")
    return reader.problems
