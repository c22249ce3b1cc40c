#!/usr/bin/env bash
# Runs the turnstile benchmark on this machine: starts a local ZooKeeper
# (temp dir, free loopback port) and one turnstiled replica, runs
# `turnstile-bench` (w1..w5 unless flags say otherwise), prints its tables
# and BENCH_JSON lines, then stops both by PID.
#
#   bash deploy/local/bench.sh                 # the full bench (w1..w5), ~2 minutes
#   bash deploy/local/bench.sh --quick         # ~15 s smoke run
#   bash deploy/local/bench.sh --no-fsync      # ZooKeeper without fsync (forceSync=no)
#   bash deploy/local/bench.sh --workloads w4 --herd-sizes 10,100,1000
#   bash deploy/local/bench.sh --workloads w5  # only the 20,000 waiters on one replica
#
# Every other argument goes to turnstile-bench (`turnstile bench --help`),
# e.g. --warmup 3s (unmeasured cycles on both sides first) and --slices 4
# (W1..W3 interleave the sides ABBABAAB; --slices 1 = turnstile, then floor).
# Needs the binaries built in build/ (bash deploy/local/build.sh, or
# `cmake --build build --target turnstiled turnstile turnstile-bench`);
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
# Replica limits, so that the largest workloads fit:
#   --max-contenders-per-lock 20001  W4's largest herd is 10,000 waiters + 1
#       holder on one lock, W5's big lock half of its waiters + 1 (the
#       default limit is 1000).
#   --max-streams 25000  W5 opens 20,000 waiters + 100 reference waiters +
#       111 holders on this one replica (default 10,000).
#   --max-watch-bytes 2 MiB  each contender budgets len(root) + len(lock
#       segment) + 40 bytes, ~70 here: W4's 10,001 need ~700 KB, W5's 20,211
#       ~1.4 MB (default 512 KiB).
# The watch budget exists because ZooKeeper's C client re-sends every watch
# of a session in one SetWatches packet on reconnect, and ZooKeeper refuses a
# packet over jute.maxbuffer (1 MiB by default). W5's ~20,000 watched paths
# make a ~1.3 MB packet, so this ZooKeeper runs with jute.maxbuffer=4 MiB: a
# reconnect during the run would otherwise break the replica's session. A
# production replica with that many waiters needs the same (or fewer waiters
# per replica).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="${TURNSTILE_BUILD_DIR:-$top/build}"
for b in "$bin/server/turnstiled" "$bin/client/turnstile" "$bin/client/bench/turnstile-bench"; do
  [ -x "$b" ] || { echo "missing $b: build first (bash deploy/local/build.sh)" >&2; exit 1; }
done

force_sync=yes
bench_args=()
for arg in "$@"; do
  if [ "$arg" = --no-fsync ]; then force_sync=no; else bench_args+=("$arg"); fi
done
fsync_label=on
[ $force_sync = yes ] || fsync_label=off

source "$top/deploy/local/local-cluster.sh"
cluster_begin
start=$SECONDS
start_zookeeper "" "$force_sync" -Djute.maxbuffer=4194304
start_turnstiled "" --max-contenders-per-lock 20001 --max-streams 25000 \
  --max-watch-bytes $((2 * 1024 * 1024))
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# Bounded: the bench stops by itself; the timeout is a last resort. The
# full default run (a 3 s warm-up, W4 up to 10,000 waiters, W5 with 20,000)
# takes about 110 s on a shared 2-core machine.
rc=0
timeout --signal=TERM --kill-after=10 "${TURNSTILE_BENCH_TIMEOUT:-600}" \
  "$bin/client/bench/turnstile-bench" --server "127.0.0.1:$ts_port" --zk "127.0.0.1:$zk_port" \
  --zk-fsync "$fsync_label" --server-pid "$ts_pid" ${bench_args[@]+"${bench_args[@]}"} || rc=$?
echo
if [ $rc -ne 0 ]; then
  echo "== turnstile-bench exited with $rc; last lines of the replica log:"
  tail -20 "$work/turnstiled.log"
fi
echo "== wall time $((SECONDS - start)) s; stopping turnstiled and ZooKeeper"
exit $rc
