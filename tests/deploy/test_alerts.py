"""The Prometheus rules: valid (promtool check rules), unit-tested (promtool test rules), and written
against metrics the server exports."""

from __future__ import annotations

import yaml

from tests.deploy.exported import Exported, problems, recording_rules
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


def test_rules_use_only_exported_metrics_and_labels(exported: Exported) -> None:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    wrong = [
        f"{rule.get('alert') or rule.get('record')}: {problem}"
        for rule in rules
        for problem in problems(rule["expr"], exported, recording_rules())
    ]
    assert wrong == []


def test_503_load_shedding_is_not_a_server_error_page() -> None:
    """The error-rate rule pages on 500s and ignores 503s (admission control, a full queue)."""
    requests = {'turbotts_request_duration_seconds_count{job="tts", status="200"}': "0+100x30"}
    for status, should_fire in (("500", True), ("503", False), ("429", False)):
        series = {**requests, f'turbotts_errors_total{{job="tts", status="{status}"}}': "0+10x30"}
        assert alert_fires("TurboTTSServerErrors", series, eval_time="20m") is should_fire, status
