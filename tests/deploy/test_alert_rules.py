"""deploy/prometheus/alerts.yml: a Prometheus rule file (its schema checked here, as promtool
would; no promtool is installed) whose rules each wait (`for:`), carry a severity and say what
to do. That every metric the expressions read is exported by a real role is checked with the
dashboard's queries, on real roles, in tests/deploy/test_grafana_dashboard.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS_MADE = frozenset({"up"})  # series Prometheus writes for each target, exported by no role

_GROUP_KEYS = {"name", "interval", "rules", "limit"}
_ALERT_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_SEVERITIES = {"critical", "warning", "info"}
# PromQL words that are not metric names: operators, modifiers, and label lists of grouping clauses
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "offset", "inf", "nan"}
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def rule_file() -> dict[str, Any]:
    return yaml.safe_load(RULES.read_text())


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_file()["groups"] for rule in group["rules"]]


def expr_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not inside a string, a
    label matcher, a range, or a grouping clause's label list, not a function or aggregation
    (followed by an opening parenthesis) and not an operator or modifier."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', "", expr)  # strings first: they may hold braces
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"(?<![\w:])\d[\w.]*", " ", text)  # numbers and durations (offset 5m, 1e3)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in _IDENT.finditer(text):
        following = text[match.end():].lstrip()
        if match.group() not in _KEYWORDS and not following.startswith("("):
            names.add(match.group())
    return names


def alert_metrics() -> set[str]:
    """Every metric name the rules' expressions read, less the series Prometheus itself makes."""
    return {name for rule in alerts() for name in expr_metrics(rule["expr"])} - PROMETHEUS_MADE


def test_the_file_is_a_prometheus_rule_file() -> None:
    data = rule_file()
    assert set(data) == {"groups"} and data["groups"]
    names = [g["name"] for g in data["groups"]]
    assert len(names) == len(set(names)), "group names are unique"
    for group in data["groups"]:
        assert set(group) <= _GROUP_KEYS and group["rules"], group["name"]
        for rule in group["rules"]:
            assert set(rule) <= _ALERT_KEYS and "alert" in rule, rule  # alerting rules only
            assert isinstance(rule["expr"], str) and rule["expr"].strip(), rule["alert"]
            assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
            assert all(isinstance(v, str) for v in {**rule["labels"], **rule["annotations"]}.values())


def test_every_alert_waits_has_a_severity_and_says_what_happened() -> None:
    rules = alerts()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names are unique"
    for rule in rules:
        assert _ALERT_NAME.match(rule["alert"]), rule["alert"]
        assert _DURATION.match(rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in _SEVERITIES, rule["alert"]
        assert len(rule["annotations"]["summary"]) > 20, rule["alert"]
        assert len(rule["annotations"]["description"].split()) >= 15, rule["alert"]


def test_the_rules_cover_what_an_on_call_engineer_is_paged_for() -> None:
    read = alert_metrics()
    for metric in ("streamrec_trainer_consumer_lag_records", "streamrec_trainer_pass_elapsed_seconds",
                   "streamrec_bundle_freshness_seconds", "process_start_time_seconds",
                   "streamrec_shard_table_max_bytes", "streamrec_trainer_rejected_records_total",
                   "streamrec_trainer_disk_full", "streamrec_trainer_checkpoint_free_bytes"):
        assert metric in read, metric


def test_metric_names_are_read_from_expressions_without_functions_labels_or_keywords() -> None:
    expr = ('sum by (namespace, table) (rate(a_total{reason="b{c}"}[5m])) > 0.9 * on (x) group_left (y) '
            "b_bytes / ignoring(z) c_seconds offset 5m and d unless predict_linear(e[1h], 4 * 3600) < 0")
    assert expr_metrics(expr) == {"a_total", "b_bytes", "c_seconds", "d", "e"}


def test_compose_prometheus_loads_the_rules_and_its_jobs_match_them() -> None:
    deploy = RULES.parents[1]
    config = yaml.safe_load((deploy / "prometheus.yml").read_text())
    compose = yaml.safe_load((deploy / "docker-compose.yml").read_text())
    mounts = dict(v.removesuffix(":ro").split(":", 1)[::-1] for v in compose["services"]["prometheus"]["volumes"]
                  if v.startswith("./"))
    for rule_file in config["rule_files"]:
        source = mounts[f"/etc/prometheus/{rule_file}"]
        assert (deploy / source).resolve() == RULES
    # StreamrecRoleDown selects the scrape jobs by this prefix
    assert all(job["job_name"].startswith("streamrec") for job in config["scrape_configs"])
