"""The Prometheus rules: valid (promtool check rules), unit-tested (promtool test rules), and written
against metrics the server exports."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.deploy.exported import Exported, labels_of, problems
from tests.deploy.promtool import ALERTS, ALERTS_TEST, alert_fires, promtool


def test_rules_are_valid() -> None:
    done = promtool("check", "rules", ALERTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 11 rules found" in done.stdout


def test_rule_unit_tests_pass() -> None:
    done = promtool("test", "rules", ALERTS_TEST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r}
    fired = {
        case["alertname"]
        for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts and alerts == fired


def _rules(text: str | None = None) -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8") if text is None else text)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _problems(rules: list[dict[str, Any]], series: Exported) -> list[str]:
    return [f"{rule.get('alert') or rule.get('record')}: {p}" for rule in rules for p in problems(rule["expr"], series)]


def _annotation_problems(rules: list[dict[str, Any]], series: Exported) -> list[str]:
    """Alerts whose summary or description shows a ``$labels.x`` that their expression does not keep."""
    wrong = []
    for rule in (r for r in rules if "alert" in r):
        wanted = set(re.findall(r"\$labels\.(\w+)", " ".join(rule.get("annotations", {}).values())))
        kept = labels_of(rule["expr"], series)
        if kept is not None and wanted - kept:
            wrong.append(f"{rule['alert']}: {sorted(wanted - kept)} not in {sorted(kept)}")
    return wrong


def test_rules_use_only_exported_metrics_and_labels(series: Exported) -> None:
    assert _problems(_rules(), series) == []


def test_alert_annotations_name_only_labels_their_rule_keeps(series: Exported) -> None:
    assert _annotation_problems(_rules(), series) == []


def test_the_check_catches_wrong_labels_groupings_and_annotations(series: Exported) -> None:
    """Admission rejections and Redis outages have no sample in a quiet server's scrape; their labels still count."""
    text = ALERTS.read_text(encoding="utf-8")
    for old, new in (
        ("turbotts_admission_rejections_total[5m]", 'turbotts_admission_rejections_total{cause="queue"}[5m]'),
        (
            "sum by (job, instance) (increase(turbotts_redis_outages_total",
            "sum by (job, replica) (increase(turbotts_redis_outages_total",
        ),
        ("avg without (sentence)", "avg without (sentence, instance)"),
    ):
        assert old in text
        text = text.replace(old, new)
    found = _problems(_rules(text), series)
    assert any(
        p.startswith("TurboTTSAdmissionRejections: turbotts_admission_rejections_total has no label 'cause'")
        for p in found
    ), found
    assert any(
        p.startswith("TurboTTSRedisOutage: sum by (job, replica): no series has label 'replica'") for p in found
    ), found
    assert _annotation_problems(_rules(text), series) == [
        "TurboTTSRedisOutage: ['instance'] not in ['job', 'replica']",
        "TurboTTSQualityDrift: ['instance'] not in ['job']",
    ]


def test_503_load_shedding_is_not_a_server_error_page() -> None:
    """The error-rate rule pages on 500s and ignores 503s (admission control, a full queue)."""
    requests = {'turbotts_request_duration_seconds_count{job="tts", status="200"}': "0+100x30"}
    for status, should_fire in (("500", True), ("503", False), ("429", False)):
        series = {**requests, f'turbotts_errors_total{{job="tts", status="{status}"}}': "0+10x30"}
        assert alert_fires("TurboTTSServerErrors", series, eval_time="20m") is should_fire, status
