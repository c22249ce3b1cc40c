#!/usr/bin/env bash
# deploy/local/bench.sh --security end to end (issue 24): the script makes
# its PKI and policies, starts a TLS, a mutual-TLS and two policy replicas
# (10 and 10,000 rules) next to the plaintext one, and turnstile-bench runs
# W1 over all five (--quick, shortened). Checks the "w1-security" BENCH_JSON
# line: every side ran cycles with no error, each is what it says (the
# bench's checks), and every ratio to plaintext and the 10,000-rule over the
# 10-rule ratio is a positive number. Speed itself is not asserted.
#
#   bash tests/bench_script_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=$1
build=$2

help=$(TURNSTILE_BUILD_DIR="$build" bash "$top/deploy/local/bench.sh" --help)
for want in "--security" "--policy-rules" "--secure-server LABEL=ADDRESS"; do
  grep -qF -- "$want" <<< "$help" || { echo "FAIL: bench.sh --help does not mention $want"; exit 1; }
done

rc=0
out=$(TURNSTILE_BUILD_DIR="$build" bash "$top/deploy/local/bench.sh" --quick --workloads w1 \
        --security --duration 400ms --warmup 0 2>&1) || rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "FAIL: bench.sh exited $rc"; exit 1; }
line=$(printf '%s\n' "$out" | sed -n 's/^BENCH_JSON //p' | grep -F '"workload":"w1-security"' || true)
[ -n "$line" ] || { echo "FAIL: no w1-security BENCH_JSON line"; exit 1; }

python3 - "$line" <<'PY'
import json, math, sys

j = json.loads(sys.argv[1])
failures = []

def check(ok, what):
    if not ok:
        failures.append(what)

def positive(obj, key, where):
    v = obj.get(key)
    check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
          "%s.%s = %r, not a positive number" % (where, key, v))

check(j["ok"] == 1 and j["error"] is None, "not ok: %r" % j.get("error"))
labels = ["plaintext", "tls", "mtls", "policy-10", "policy-10000"]
check([s["label"] for s in j["side_order"]] == labels, "sides %r" % j["side_order"])
for k, label in enumerate(labels):
    s = j["sides"][label]
    for key in ("cycles", "ops_per_s", "cycle_p50_ms", "turnstiled_cpu_ms_per_cycle"):
        positive(s, key, label)
    check(s["errors"] == 0, "%s: errors" % label)
    check((s["tls"], s["mtls"]) == (int(k > 0), int(k > 1)), "%s: tls/mtls flags" % label)
    check(s["policy_rules"] == [0, 0, 0, 10, 10000][k], "%s: policy_rules" % label)
    for key in ("ops_per_s", "cycle_p50_ms", "turnstiled_cpu_ms_per_cycle"):
        positive(s["ratio_to_plaintext"], key, label + ".ratio_to_plaintext")
    if k == 0:
        continue
    c = s["checks"]
    check(c["granted"] == 1 and c["plaintext_refused"] == 1, "%s: checks %r" % (label, c))
    check(c["no_client_cert_refused"] == (1 if k > 1 else None), "%s: checks %r" % (label, c))
    check(c["outside_policy_denied"] == (1 if k > 2 else None), "%s: checks %r" % (label, c))
p = j["policy_size"]
check(p is not None and (p["more_rules"], p["fewer_rules"]) == (10000, 10), "policy_size %r" % p)
for key in ("ops_per_s", "cycle_p50_ms", "turnstiled_cpu_ms_per_cycle"):
    positive(p, key, "policy_size")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
PY
# The replicas and ZooKeeper were stopped, the temp dir (keys included) removed.
pki=$(printf '%s\n' "$out" | sed -n 's/^== PKI in \(.*\) (removed on exit)$/\1/p')
[ -n "$pki" ] || { echo "FAIL: bench.sh did not say where its PKI was"; exit 1; }
[ ! -e "$pki" ] || { echo "FAIL: $pki (with the PKI's keys) is still there"; exit 1; }
echo "PASS"
