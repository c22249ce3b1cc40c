#!/usr/bin/env bash
# Runs the turnstile benchmark on this machine: starts a local ZooKeeper
# (temp dir, free loopback port) and one turnstiled replica, runs
# `turnstile-bench` (all workloads unless flags say otherwise), prints its
# tables and BENCH_JSON lines, then stops both by PID.
#
#   bash deploy/local/bench.sh                 # the full bench (w1..w4, 5 s each)
#   bash deploy/local/bench.sh --quick         # ~1 minute smoke run
#   bash deploy/local/bench.sh --workloads w4 --herd-sizes 10,100,1000
#
# Needs the binaries built in build/ (bash deploy/local/build.sh, or
# `cmake --build build --target turnstiled turnstile-bench`).
#
# The replica runs with --max-contenders-per-lock 2000 because W4's largest
# herd (1000 waiters + 1 holder) exceeds the default limit of 1000. Its
# --max-watch-bytes stays at the default 512 KiB: each contender budgets
# len(root) + len(lock segment) + 40 bytes, ~70 bytes here, so ~7000
# contenders fit. ZooKeeper runs with forceSync=no (no fsync per write):
# turnstile and the raw-ZooKeeper floor share the same server, so their ratio
# stays fair, and a shared machine's disk does not dominate the numbers.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="$top/build"
for b in "$bin/server/turnstiled" "$bin/client/bench/turnstile-bench"; do
  [ -x "$b" ] || { echo "missing $b: build first (bash deploy/local/build.sh)" >&2; exit 1; }
done

source "$top/deploy/local/local-cluster.sh"
cluster_begin
start=$SECONDS
start_zookeeper
start_turnstiled "" --max-contenders-per-lock 2000
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# Bounded: the bench stops by itself; the timeout is a last resort.
rc=0
timeout --signal=TERM --kill-after=10 270 \
  "$bin/client/bench/turnstile-bench" --server "127.0.0.1:$ts_port" --zk "127.0.0.1:$zk_port" "$@" || rc=$?
echo
if [ $rc -ne 0 ]; then
  echo "== turnstile-bench exited with $rc; last lines of the replica log:"
  tail -20 "$work/turnstiled.log"
fi
echo "== wall time $((SECONDS - start)) s; stopping turnstiled and ZooKeeper"
exit $rc
