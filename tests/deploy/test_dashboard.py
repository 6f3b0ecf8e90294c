"""The Grafana dashboards plot only what the server exports, and cover what operators watch."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.exported import (
    PENDING_METRICS,
    Exported,
    labels_of,
    metric_names,
    problems,
    with_recording_rules,
)
from tests.required_tools import REPO
from turbotts.server.ops.metrics import Metrics

DASHBOARD = REPO / "deploy" / "grafana" / "turbotts.json"
#: What docker-compose's Grafana loads: the fleet behind the Ray endpoint.
FLEET_DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "turbotts.json"
#: What the dashboard must show (issue 13 part 3), by the metric each view rests on.
COVERED = {
    "turbotts_time_to_first_audio_seconds_bucket", "turbotts_real_time_factor_bucket", "turbotts_running_sequences",
    "turbotts_queue_depth", "turbotts_realtime_capacity_streams", "turbotts_cache_lookups_total",
    "turbotts_errors_total", "turbotts_rate_limited_total", "turbotts_admission_rejections_total",
    "turbotts_redis_outages_total", "turbotts_quality_mcd_db",
}  # fmt: skip


def _load(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold theirs


def _queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every templating query."""
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]["query"]


def _problems(dashboard: dict[str, Any], series: Exported) -> list[str]:
    return [f"{where}: {problem}" for where, expr in _queries(dashboard) for problem in problems(expr, series)]


def _legend_problems(dashboard: dict[str, Any], series: Exported) -> list[str]:
    """Legends that name a label the query does not keep (Grafana shows it blank)."""
    wrong = []
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            kept = labels_of(target["expr"], series)
            if kept is not None and wanted - kept:
                wrong.append(
                    f"panel {panel['title']!r} {target['refId']}: {sorted(wanted - kept)} not in {sorted(kept)}"
                )
    return wrong


def _fleet_labels() -> set[str]:
    """The labels the Ray endpoint's /metrics adds to a replica's samples (its own merge, on a real exposition)."""
    fleet_metrics = pytest.importorskip("turbotts.scaleout.fleet_metrics", reason="pip install 'turbotts[ray]'")
    text = Metrics().render(None).decode()

    def label_names(exposition: str) -> set[str]:
        return {name for f in text_string_to_metric_families(exposition) for s in f.samples for name in s.labels}

    return label_names(fleet_metrics.merge({"replica-0": text})) - label_names(text)


def test_every_query_uses_only_exported_metrics_and_labels(series: Exported) -> None:
    assert _problems(_load(), series) == []


def test_every_legend_names_a_label_its_query_keeps(series: Exported) -> None:
    assert _legend_problems(_load(), series) == []


def test_the_fleet_dashboard_uses_only_exported_metrics_and_labels() -> None:
    fleet = with_recording_rules(Exported.declared().with_labels(_fleet_labels()))
    assert _problems(_load(FLEET_DASHBOARD), fleet.with_series(dict.fromkeys(PENDING_METRICS))) == []
    assert _legend_problems(_load(FLEET_DASHBOARD), fleet) == []


def test_the_check_catches_wrong_metrics_labels_groupings_and_legends(series: Exported) -> None:
    text = DASHBOARD.read_text(encoding="utf-8")
    for old, new in (
        ("turbotts_queue_depth", "turbotts_queue_length"),  # a renamed metric
        ('result=\\"hit\\"', 'outcome=\\"hit\\"'),  # a wrong label on a counter that fired
        ("turbotts_admission_rejections_total{job", 'turbotts_admission_rejections_total{cause=\\"queue\\", job'),
        ("sum by (scope)", "sum by (limit)"),  # grouped by a label a never-firing counter does not have
        ("sum by (le) (rate(turbotts_real_time_factor", "sum by (job) (rate(turbotts_real_time_factor"),
    ):
        assert old in text
        text = text.replace(old, new)
    found = _problems(json.loads(text), series)
    for expected in (
        "panel 'Streams running and waiting' B: turbotts_queue_length is not exported",
        "panel 'Cache hit rate by level' A: turbotts_cache_lookups_total has no label 'outcome'",
        "panel '429 and 503 rates' D: turbotts_admission_rejections_total has no label 'cause'",
        "panel '429 and 503 rates' C: sum by (limit): no series has label 'limit'",
        "panel 'Real-time factor p50 / p99' A: histogram_quantile: no series has label 'le'",
    ):
        assert any(p.startswith(expected) for p in found), (expected, found)
    legends = _legend_problems(
        json.loads(DASHBOARD.read_text(encoding="utf-8").replace("sum by (reason)", "sum")), series
    )
    assert legends == ["panel '429 and 503 rates' D: ['reason'] not in []"]


def test_the_declarations_are_what_a_real_server_exports(scraped: Exported) -> None:
    """The checks read the metric declarations; a server's scrape shows no series or label they lack."""
    declared = {name: labels or frozenset() for name, labels in Exported.declared().labels.items()}
    seen = {name: labels or frozenset() for name, labels in scraped.labels.items()}
    undeclared = {
        name: sorted(labels - declared.get(name, frozenset()))
        for name, labels in seen.items()
        if name not in declared or not labels <= declared[name]
    }
    assert undeclared == {}
    assert "status" in seen.get("turbotts_errors_total", frozenset())  # the scrape saw labelled series


def test_no_pending_metric_is_already_exported() -> None:
    """A pending entry hides a metric's labels from the checks: it goes once the server exports the metric."""
    assert PENDING_METRICS & set(Exported.declared().labels) == set()


def test_the_dashboard_covers_latency_load_cache_guards_and_quality() -> None:
    used = set().union(*(metric_names(expr) for _, expr in _queries(_load())))
    assert COVERED - used == set()


def test_panels_are_well_formed() -> None:
    dashboard = _load()
    panels = list(_panels(dashboard))
    assert len({p["id"] for p in panels}) == len(panels)
    assert dashboard["uid"] == "turbotts" and dashboard["title"] == "TurboTTS"
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"] and panel["description"], panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
