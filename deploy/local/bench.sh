#!/usr/bin/env bash
# Runs the turnstile benchmark on this machine: starts a local ZooKeeper
# (temp dir, free loopback port) and one turnstiled replica, runs
# `turnstile-bench` (w1..w5 unless flags say otherwise), prints its tables
# and BENCH_JSON lines, then stops them by PID (with --security, one more
# replica per secure side: see below).
#
#   bash deploy/local/bench.sh                 # the full bench (w1..w5), ~2 minutes
#   bash deploy/local/bench.sh --quick         # ~20 s smoke run
#   bash deploy/local/bench.sh --no-fsync      # ZooKeeper without fsync (forceSync=no)
#   bash deploy/local/bench.sh --workloads w4 --herd-sizes 10,100,1000
#   bash deploy/local/bench.sh --workloads w5  # only the 20,000 waiters on one replica
#   bash deploy/local/bench.sh --workloads w6  # what a /metrics scrape costs handoffs
#   bash deploy/local/bench.sh --workloads w3 --zk-sessions 1  # the replica's pool (default 4)
#   bash deploy/local/bench.sh --workloads w1,w3 --no-batch   # the replica with --batch-zk-writes=false
#   bash deploy/local/bench.sh --no-zk-restart # W5 without its ZooKeeper restart
#   bash deploy/local/bench.sh --workloads w1,w2,w3 --security
#                                              # W1..W3 also over TLS, mutual TLS and
#                                              # mutual TLS with policies of 10 and
#                                              # 10,000 rules: ratios to plaintext
#   bash deploy/local/bench.sh --security --policy-rules 10,1000,10000
#   bash deploy/local/bench.sh --help          # this text, then turnstile-bench's flags
#
# --security (issue 24: what mutual TLS and a policy cost) makes a throw-away
# PKI with openssl in the run's temp dir (removed on exit; nothing secret is
# kept): a CA, a server certificate for 127.0.0.1/localhost, and the bench's
# client certificate (URI SAN spiffe://turnstile.bench/client/bench). It
# writes one policy per --policy-rules count N (default 10,10000): N-1 rules
# on distinct prefixes for other identities (team-00001/ ... for
# spiffe://turnstile.bench/team-00001/*), then the one rule that lets the
# bench's identity acquire names starting "bench-"; the bench checks that
# anything else ("probe-denied-...") is PERMISSION_DENIED. Then it starts,
# next to the plaintext replica and with the same flags, one replica each
# with TLS (--tls-cert-file/--tls-key-file), mutual TLS
# (--tls-client-ca-file) and mutual TLS with each policy (--authz-file), and
# passes them to turnstile-bench as --secure-server: W1..W3 then also run
# over plaintext and each of them, interleaved in the same run, and each
# prints a second table and a "wN-security" BENCH_JSON line with every
# side's ratio to plaintext and the largest policy's over the smallest's.
# W4 and W5 stay plaintext. The channels are open before measuring: the
# ratios are the per-call cost (encryption, identity, policy), not
# handshakes.
#
# Every other argument goes to turnstile-bench (`turnstile bench --help`),
# e.g. --warmup 3s (unmeasured cycles on both sides first) and --slices 4
# (W1..W3 interleave the sides ABBABAAB; --slices 1 = turnstile, then floor).
# Needs the binaries built in build/ (bash deploy/local/build.sh, or
# `cmake --build build --target turnstiled turnstile turnstile-bench
# turnstile-bare-server`);
# TURNSTILE_BUILD_DIR=/path/to/build uses another build directory.
# TURNSTILE_BENCH_TIMEOUT (seconds, default 600) bounds the bench itself.
#
# ZooKeeper fsyncs every write (forceSync=yes, its default) unless
# --no-fsync is given: that is what a production ensemble does, and each
# write's latency includes it. Turnstile and the raw-ZooKeeper floor share
# the same server, so their ratio stays fair either way. The choice is passed
# to the bench (--zk-fsync on|off) and printed in every table heading and
# BENCH_JSON line.
#
# W5 restarts ZooKeeper while its 20,000 waiters wait (issue 10, must-show
# 3): turnstile-bench runs `local-cluster.sh restart-zookeeper` (same port,
# zoo.cfg and data dir) and checks that the replica comes back on the same
# sessions with every watch, then drains as usual. --no-zk-restart skips it.
#
# W5 first puts the same number of idle Acquire streams on
# turnstile-bare-server (gRPC alone, same proto, no engine, no ZooKeeper;
# started and stopped by turnstile-bench, --bare-server) and reports the
# replica's RSS over the bare server's (issue 20: target <= 1.15).
#
# ZooKeeper runs with its defaults, jute.maxbuffer (1 MiB) included. Replica
# flags, so that the largest workloads fit:
#   --max-contenders-per-lock 20001  W4's largest herd is 10,000 waiters + 1
#       holder on one lock, W5's big lock half of its waiters + 1 (the
#       default limit is 1000).
#   --max-streams 25000  W5 opens 20,000 waiters + 100 reference waiters +
#       111 holders on this one replica (default 10,000).
#   --zk-sessions 4, --max-watch-bytes 900 KiB (per session)  ZooKeeper's C
#       client re-sends all of a session's watches in one SetWatches packet
#       on reconnect, which ZooKeeper refuses over jute.maxbuffer, breaking
#       the session; the budget keeps each session's packet under it. Each
#       contender budgets len(root) + len(lock segment) + 40 bytes, ~70 here
#       (the watched path itself is ~65 with its length prefix). One lock's
#       contenders share one session: W4's 10,001 on one lock need ~700 KB,
#       W5's big lock (10,001) ~680 KB, so 900 KiB = 921,600 bytes, ~13,000
#       contenders per session. W5's other locks (100 x 101 + 10 x 11
#       contenders) are spread by the hash of their names, which carry the
#       bench's PID: over every PID up to 4,194,304 the fullest session of the
#       4 budgets at most 878,794 bytes (the big lock, 25 or 26 of the 100
#       and 2 or 3 of the 10: modulo 4, FNV-1a spreads names that differ in
#       their last characters evenly), with at most ~814 KB of watched paths
#       in its SetWatches packet: under both. (3 sessions would not do: over
#       900 KiB for about one PID in six.)
#   --zk-session-timeout 30s  the restart (JVM start included) must end
#       within the session timeout, or the sessions expire and the holds are
#       lost; zoo.cfg's maxSessionTimeout (60 s) allows it.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="${TURNSTILE_BUILD_DIR:-$top/build}"
for b in "$bin/server/turnstiled" "$bin/client/turnstile" "$bin/client/bench/turnstile-bench" \
         "$bin/client/bench/turnstile-bare-server" "$bin/client/bench/turnstile-zk-floor"; do
  [ -x "$b" ] || { echo "missing $b: build first (bash deploy/local/build.sh)" >&2; exit 1; }
done

force_sync=yes
zk_restart=1
security=0
policy_rules=10,10000
zk_sessions=4
batch=true
bench_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-fsync) force_sync=no ;;
    --no-zk-restart) zk_restart=0 ;;
    --security) security=1 ;;
    --policy-rules) [ $# -ge 2 ] || { echo "bench.sh: --policy-rules needs a value" >&2; exit 2; }
                    policy_rules=$2; security=1; shift ;;
    --policy-rules=*) policy_rules=${1#--policy-rules=}; security=1 ;;
    --no-batch) batch=false ;;
    --zk-sessions) [ $# -ge 2 ] || { echo "bench.sh: --zk-sessions needs a value" >&2; exit 2; }
                   zk_sessions=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
               echo; exec "$bin/client/bench/turnstile-bench" --help ;;
    *) bench_args+=("$1") ;;
  esac
  shift
done
[[ $policy_rules =~ ^[1-9][0-9]{0,6}(,[1-9][0-9]{0,6})*$ ]] ||
  { echo "bench.sh: --policy-rules must be a list of rule counts, e.g. 10,10000" >&2; exit 2; }
fsync_label=on
[ $force_sync = yes ] || fsync_label=off

source "$top/deploy/local/local-cluster.sh"
cluster_begin
start=$SECONDS
start_zookeeper "" "$force_sync"
[[ $zk_sessions =~ ^[1-9][0-9]?$ ]] || { echo "bench.sh: --zk-sessions must be 1..64" >&2; exit 2; }
replica_flags=(--zk-session-timeout 30s --zk-sessions "$zk_sessions" --batch-zk-writes="$batch"
  --max-contenders-per-lock 20001 --max-streams 25000 --max-watch-bytes $((900 * 1024)))
metrics_port=$(free_port)  # W6 scrapes it
start_turnstiled "" "${replica_flags[@]}" --metrics-listen "127.0.0.1:$metrics_port"

# --security: the PKI, the policies and one replica per secure side.
secure_args=()
if [ $security = 1 ]; then
  command -v openssl > /dev/null || { echo "bench.sh: --security needs openssl" >&2; exit 1; }
  pki="$work/pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    umask 077
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 2 \
      -subj "/CN=turnstile-bench-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign"
    leaf() {  # leaf NAME CN EXTENSIONS
      openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
      printf '%b' "$3" > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" \
        -days 2 -extfile "$1.ext"
    }
    leaf server localhost "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    leaf client bench "subjectAltName=URI:spiffe://turnstile.bench/client/bench\nextendedKeyUsage=clientAuth\n"
  ) > "$work/pki.log" 2>&1 || { echo "bench.sh: openssl failed:" >&2; cat "$work/pki.log" >&2; exit 1; }
  echo "== PKI in $pki (removed on exit)"
  tls_server=(--tls-cert-file "$pki/server.crt" --tls-key-file "$pki/server.key")
  more_health_flags=(--tls-ca-file "$pki/ca.crt")
  start_more_turnstiled tls "${replica_flags[@]}" "${tls_server[@]}"
  secure_args+=(--secure-server "tls=127.0.0.1:$more_port,ca=$pki/ca.crt,pid=$more_pid")
  client_files="ca=$pki/ca.crt,cert=$pki/client.crt,key=$pki/client.key"
  more_health_flags=(--tls-ca-file "$pki/ca.crt" --tls-cert-file "$pki/client.crt"
                     --tls-key-file "$pki/client.key")
  start_more_turnstiled mtls "${replica_flags[@]}" "${tls_server[@]}" --tls-client-ca-file "$pki/ca.crt"
  secure_args+=(--secure-server "mtls=127.0.0.1:$more_port,$client_files,pid=$more_pid")
  for n in ${policy_rules//,/ }; do
    # N-1 rules on distinct prefixes for other identities, then the bench's.
    awk -v n="$n" 'BEGIN {
      printf "{\"rules\": [\n"
      for (i = 1; i < n; i++)
        printf "  {\"identities\": [\"spiffe://turnstile.bench/team-%05d/*\"], \"locks\": [\"team-%05d/\"], \"actions\": [\"acquire\", \"describe\"]},\n", i, i
      printf "  {\"identities\": [\"spiffe://turnstile.bench/client/bench\"], \"locks\": [\"bench-\"], \"actions\": [\"acquire\"], \"description\": \"the bench\"}\n]}\n"
    }' > "$work/policy-$n.json"
    start_more_turnstiled "policy-$n" "${replica_flags[@]}" "${tls_server[@]}" \
      --tls-client-ca-file "$pki/ca.crt" --authz-file "$work/policy-$n.json"
    secure_args+=(--secure-server "policy-$n=127.0.0.1:$more_port,$client_files,pid=$more_pid,rules=$n")
  done
fi
# Before the caller's arguments, so that their own --w5-restart-zk wins.
restart_args=()
if [ $zk_restart = 1 ]; then
  restart_cmd=$(printf '%q ' bash "$top/deploy/local/local-cluster.sh" restart-zookeeper "$work")
  restart_args=(--w5-restart-zk "${restart_cmd% }")
fi
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# Bounded: the bench stops by itself; the timeout is a last resort. The
# full default run (a 3 s warm-up, W4 up to 10,000 waiters, W5 with 20,000
# and its ZooKeeper restart) takes about 2 minutes on a shared 2-core machine.
rc=0
timeout --signal=TERM --kill-after=10 "${TURNSTILE_BENCH_TIMEOUT:-600}" \
  "$bin/client/bench/turnstile-bench" --server "127.0.0.1:$ts_port" --zk "127.0.0.1:$zk_port" \
  --metrics "127.0.0.1:$metrics_port" \
  --zk-fsync "$fsync_label" --server-pid "$ts_pid" --zk-pid "$(current_zk_pid)" \
  --bare-server "$bin/client/bench/turnstile-bare-server" ${restart_args[@]+"${restart_args[@]}"} \
  ${secure_args[@]+"${secure_args[@]}"} ${bench_args[@]+"${bench_args[@]}"} || rc=$?
echo
if [ $rc -ne 0 ]; then
  echo "== turnstile-bench exited with $rc; last lines of the replica log:"
  tail -20 "$work/turnstiled.log"
  for log in "$work"/turnstiled-*.log; do
    [ -e "$log" ] || continue
    echo "== last lines of $(basename "$log"):"
    tail -5 "$log"
  done
  echo "== last lines of the ZooKeeper log:"
  tail -10 "$work/zk.log"
fi
echo "== wall time $((SECONDS - start)) s; stopping the replicas and ZooKeeper"
exit $rc
