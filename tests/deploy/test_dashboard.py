"""The Grafana dashboard plots only what the server exports, and covers what operators watch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.deploy.exported import PENDING_METRICS, Exported, metric_names, problems, recording_rules
from tests.required_tools import REPO

DASHBOARD = REPO / "deploy" / "grafana" / "turbotts.json"
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
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]["query"]


def test_every_query_uses_only_exported_metrics_and_labels(exported: Exported) -> None:
    allowed = recording_rules() | set(PENDING_METRICS)
    wrong = [f"{where}: {p}" for where, expr in _queries(_load()) for p in problems(expr, exported, allowed)]
    assert wrong == []


def test_the_check_catches_a_renamed_metric_and_a_wrong_label(exported: Exported) -> None:
    text = DASHBOARD.read_text(encoding="utf-8").replace("turbotts_queue_depth", "turbotts_queue_length")
    broken = text.replace('result=\\"hit\\"', 'outcome=\\"hit\\"')
    dashboard = json.loads(broken)
    found = [p for _, expr in _queries(dashboard) for p in problems(expr, exported, recording_rules())]
    assert "turbotts_queue_length is not exported" in found
    assert any("turbotts_cache_lookups_total has no label 'outcome'" in p for p in found)


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
