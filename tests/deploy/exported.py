"""What a real server exports on /metrics, and the metric names and label matchers a PromQL expression uses.

The dashboard and the alert rules are checked against a scrape, not a list kept by hand: a metric
renamed in ``turbotts/server/metrics.py`` breaks these tests instead of a panel going blank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.promtool import ALERTS

#: Exported by another change in flight (issue 13 part 2); the dashboard may use it before it lands.
PENDING_METRICS = frozenset({"turbotts_realtime_capacity_streams"})
#: Labels Prometheus adds at scrape time, and the histogram bucket bound.
SCRAPE_LABELS = frozenset({"job", "instance"})
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
             "gauge": ("",), "summary": ("_count", "_sum", "_created"), "info": ("_info",)}  # fmt: skip
_NAME = re.compile(r"\bturbotts[a-z0-9_:]*")
_SELECTOR = re.compile(r"\b(turbotts[a-z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


@dataclass
class Exported:
    """Series names (as PromQL sees them) and the label names seen on each."""

    labels: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Exported:
        exported = cls()
        for family in text_string_to_metric_families(text):
            for suffix in _SUFFIXES.get(family.type, ("",)):
                exported.labels.setdefault(family.name + suffix, set())
            for sample in family.samples:
                exported.labels.setdefault(sample.name, set()).update(sample.labels)
        return exported


def recording_rules(path: Path = ALERTS) -> set[str]:
    """Names recorded by the rule file (the dashboard may plot them)."""
    groups = yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def metric_names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def selector_labels(expr: str) -> list[tuple[str, str]]:
    """(metric, label) for every label matcher written in a selector's braces."""
    return [(name, label) for name, body in _SELECTOR.findall(expr) for label in _MATCHER.findall(body)]


def problems(expr: str, exported: Exported, allowed: set[str]) -> list[str]:
    """What in ``expr`` the server does not export: unknown metrics, labels no sample of that metric has."""
    found = [f"{name} is not exported" for name in sorted(metric_names(expr) - set(exported.labels) - allowed)]
    if not metric_names(expr):
        found.append("no turbotts metric in the expression")
    for name, label in selector_labels(expr):
        seen = exported.labels.get(name)
        if seen and label not in seen | SCRAPE_LABELS:
            found.append(f"{name} has no label {label!r} (it has {sorted(seen)})")
    return found
