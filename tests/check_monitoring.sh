#!/usr/bin/env bash
# Static checks of turnstile's monitoring files:
#   - promtool check config / check rules on deploy/prometheus/
#   - promtool test rules on deploy/prometheus/turnstile-rules.test.yml (alert unit tests)
#   - deploy/grafana/dashboards/turnstile.json: parses, schemaVersion >= 36, has the
#     `datasource` and `replica` variables, every panel has targets with an expr and
#     uses ${datasource}, every turnstile_* selector is filtered by instance=~"$replica",
#     every metric name is a known turnstile / ZooKeeper / Prometheus one, and every
#     query parses as PromQL (promtool, via a throw-away rules file)
#   - every alert has a severity label and summary/description/runbook annotations
#   - writes every panel query and every rule expression, one per line, with the
#     Grafana variables replaced ($replica -> .*, $__rate_interval -> 1m), to
#     $1 (default: build/monitoring-queries.txt) for the live-Prometheus test
#     (tests/monitoring_live_test.cc). Each line is tab-separated:
#       panel<TAB><panel title>#<refId><TAB><PromQL>
#       rule<TAB><alert or record name><TAB><PromQL>
# Exits non-zero on any failure.
# Needs: promtool (Debian package `prometheus`), python3 with PyYAML (`python3-yaml`).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=${1:-$top/build/monitoring-queries.txt}
mkdir -p "$(dirname "$out")"

prom_cfg=deploy/prometheus/prometheus.yml
rules=deploy/prometheus/turnstile-rules.yml
rules_test=deploy/prometheus/turnstile-rules.test.yml
dash=deploy/grafana/dashboards/turnstile.json
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }

if ! command -v promtool >/dev/null 2>&1; then
  echo "FAIL: promtool not found (install the Debian package 'prometheus')" >&2
  exit 1
fi
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "FAIL: python3 has no PyYAML (install the Debian package 'python3-yaml')" >&2
  exit 1
fi

echo "== promtool check config $prom_cfg"
promtool check config "$prom_cfg" || fail "promtool check config"
echo "== promtool check rules $rules"
promtool check rules "$rules" || fail "promtool check rules"
if [[ -f $rules_test ]]; then
  echo "== promtool test rules $rules_test"
  promtool test rules "$rules_test" || fail "promtool test rules"
fi

for f in deploy/grafana/provisioning/datasources/prometheus.yml \
         deploy/grafana/provisioning/dashboards/turnstile.yml; do
  python3 -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$f" || fail "$f is not valid YAML"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== dashboard and rule expressions"
python3 - "$dash" "$rules" "$prom_cfg" "$out" "$tmp/dashboard-rules.yml" <<'PY' || fail "dashboard/rules checks"
import json, re, sys, yaml

dash_path, rules_path, cfg_path, out_path, promql_rules_path = sys.argv[1:6]
errors = []
def err(msg): errors.append(msg)

# --- known metric names -------------------------------------------------------
HIST = ["turnstile_acquire_wait_seconds", "turnstile_hold_seconds",
        "turnstile_handoff_seconds", "turnstile_zk_request_duration_seconds"]
TURNSTILE = {
    "turnstile_build_info", "turnstile_lock_waiters", "turnstile_lock_holders",
    "turnstile_acquires_total", "turnstile_locks_lost_total",
    "turnstile_zk_request_errors_total", "turnstile_zk_session_up",
    "turnstile_zk_session_expirations_total", "turnstile_zk_watch_events_total",
    "turnstile_open_streams", "turnstile_grpc_requests_total", "turnstile_serving",
    "turnstile_revocations_total", "turnstile_locks_in_delay", "turnstile_lock_max_holders",
    "turnstile_tls_certificate_expiry_timestamp_seconds", "turnstile_still_held_dropped_total",
    "turnstile_quota_refusals_total", "turnstile_quota_refusals_waiting",
}
for h in HIST:
    TURNSTILE |= {h + "_bucket", h + "_sum", h + "_count"}
# ZooKeeper's PrometheusMetricsProvider (job="zookeeper"), the gauges we use or may use.
ZOOKEEPER = {
    "znode_count", "watch_count", "ephemerals_count", "approximate_data_size",
    "num_alive_connections", "outstanding_requests", "avg_latency", "min_latency",
    "max_latency", "packets_received", "packets_sent", "open_file_descriptor_count",
    "max_file_descriptor_count", "quorum_size", "synced_followers", "learners",
    "leader_uptime", "election_time",
}
PROMETHEUS = {"up", "scrape_duration_seconds", "ALERTS", "ALERTS_FOR_STATE"}

KEYWORDS = {
    # aggregations, operators, modifiers
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "group", "by", "without", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "inf", "nan",
}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")

def metric_names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)       # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)                    # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                   # ranges / subqueries
    e = GROUPING.sub(" ", e)                            # grouping label lists
    names = []
    for m in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", e):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.append(name)
    return names

# --- rules ------------------------------------------------------------------------
rules_doc = yaml.safe_load(open(rules_path))
recorded = set()
rule_exprs = []
for g in rules_doc.get("groups", []):
    for r in g.get("rules", []):
        if "record" in r:
            recorded.add(r["record"])
for g in rules_doc.get("groups", []):
    for r in g.get("rules", []):
        expr = " ".join(str(r["expr"]).split())
        name = r.get("alert") or r.get("record")
        rule_exprs.append((name, expr))
        for n in metric_names(expr):
            if n not in TURNSTILE | ZOOKEEPER | PROMETHEUS | recorded:
                err(f"rule {name}: unknown metric {n!r} in {expr}")
        if "alert" in r:
            sev = (r.get("labels") or {}).get("severity")
            if sev not in ("critical", "warning", "info"):
                err(f"alert {name}: severity label missing or not critical|warning|info")
            ann = r.get("annotations") or {}
            for k in ("summary", "description", "runbook"):
                if not str(ann.get(k, "")).strip():
                    err(f"alert {name}: annotation {k} missing")
alerts = {r["alert"] for g in rules_doc["groups"] for r in g["rules"] if "alert" in r}
required_alert_metrics = {
    "turnstile_zk_session_up": "ZooKeeper session down",
    "turnstile_locks_lost_total": "locks lost",
    "turnstile_lock_waiters": "growing wait queue",
    "turnstile_acquire_wait_seconds_bucket": "wait SLO",
    "turnstile_serving": "replica not serving",
    'up{job="turnstile"}': "replica down",
}
alert_text = " ".join(" ".join(str(r["expr"]).split())
                      for g in rules_doc["groups"] for r in g["rules"])
for needle, what in required_alert_metrics.items():
    if needle not in alert_text:
        err(f"rules: nothing covers '{what}' ({needle})")

# --- prometheus.yml ----------------------------------------------------------------
cfg = yaml.safe_load(open(cfg_path))
jobs = {s["job_name"]: s for s in cfg.get("scrape_configs", [])}
for j in ("turnstile", "zookeeper"):
    if j not in jobs:
        err(f"prometheus.yml: no scrape job {j!r}")

# --- dashboard ---------------------------------------------------------------------
try:
    dash = json.load(open(dash_path))
except Exception as e:  # noqa: BLE001
    print(f"FAIL: {dash_path} does not parse as JSON: {e}", file=sys.stderr)
    sys.exit(1)
if int(dash.get("schemaVersion", 0)) < 36:
    err(f"dashboard schemaVersion {dash.get('schemaVersion')} < 36")
tvars = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
ds = tvars.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    err("dashboard: variable 'datasource' must be type datasource, query prometheus")
rep = tvars.get("replica")
if not rep:
    err("dashboard: variable 'replica' missing")
else:
    q = rep.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    if q != "label_values(turnstile_build_info, instance)":
        err(f"dashboard: replica variable query is {q!r}")
    if not rep.get("multi") or not rep.get("includeAll"):
        err("dashboard: replica variable must be multi and include All")

def all_panels(ps):
    for p in ps:
        yield p
        yield from all_panels(p.get("panels", []))

def uses_ds_var(d):
    return isinstance(d, dict) and d.get("uid") in ("${datasource}", "$datasource")

panel_exprs = []
ids = set()
n_panels = 0
for p in all_panels(dash.get("panels", [])):
    if p.get("type") == "row":
        continue
    n_panels += 1
    title = p.get("title", f"id {p.get('id')}")
    if p.get("id") in ids:
        err(f"panel {title!r}: duplicate id {p.get('id')}")
    ids.add(p.get("id"))
    if not uses_ds_var(p.get("datasource")):
        err(f"panel {title!r}: datasource is not ${{datasource}}")
    targets = p.get("targets") or []
    if not targets:
        err(f"panel {title!r}: no targets")
    for t in targets:
        expr = t.get("expr", "")
        if not expr.strip():
            err(f"panel {title!r}: target {t.get('refId')} has no expr")
            continue
        if "datasource" in t and not uses_ds_var(t["datasource"]):
            err(f"panel {title!r}: target {t.get('refId')} datasource is not ${{datasource}}")
        for n in metric_names(expr):
            if n not in TURNSTILE | ZOOKEEPER | PROMETHEUS:
                err(f"panel {title!r}: unknown metric {n!r} in {expr}")
        # every turnstile selector (and up{job="turnstile"}) honours the replica picker
        for m in re.finditer(r'(turnstile_\w+|up)(\{[^}]*\})?', expr):
            if m.group(1) == "up" and 'job="turnstile"' not in (m.group(2) or ""):
                continue
            if 'instance=~"$replica"' not in (m.group(2) or ""):
                err(f"panel {title!r}: {m.group(1)} not filtered by instance=~\"$replica\": {expr}")
        panel_exprs.append((f"{title}#{t.get('refId', '')}", " ".join(expr.split())))
if n_panels == 0:
    err("dashboard: no panels")

def live(expr):
    return (expr.replace("$__rate_interval", "1m").replace("${__rate_interval}", "1m")
                .replace("$__interval", "1m").replace("$__range", "1h")
                .replace('"$replica"', '".*"'))

# All dashboard queries as recording rules, so promtool parses them as PromQL.
with open(promql_rules_path, "w") as f:
    yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": live(e)}
        for i, (_, e) in enumerate(panel_exprs)]}]}, f)

with open(out_path, "w") as f:
    for name, e in panel_exprs:
        f.write(f"panel\t{name}\t{live(e)}\n")
    for name, e in rule_exprs:
        f.write(f"rule\t{name}\t{e}\n")

for e in errors:
    print("FAIL: " + e, file=sys.stderr)
print(f"dashboard: {n_panels} panels, {len(panel_exprs)} queries; rules: {len(rule_exprs)} "
      f"expressions ({len(alerts)} alerts); {len(errors)} problem(s)")
print(f"wrote {len(panel_exprs) + len(rule_exprs)} expressions to {out_path}")
sys.exit(1 if errors else 0)
PY

if [[ -s $tmp/dashboard-rules.yml ]]; then
  echo "== promtool parses every dashboard query"
  promtool check rules "$tmp/dashboard-rules.yml" || fail "dashboard queries are not valid PromQL"
fi

if (( failed )); then
  echo "check_monitoring: FAILED" >&2
  exit 1
fi
echo "check_monitoring: OK"
