#!/usr/bin/env bash
# Runs the turnstile benchmark on this machine: starts a local ZooKeeper
# (temp dir, free loopback port) and one turnstiled replica, runs
# `turnstile-bench` (w1..w5 unless flags say otherwise), prints its tables
# and BENCH_JSON lines, then stops both by PID.
#
#   bash deploy/local/bench.sh                 # the full bench (w1..w5), ~2 minutes
#   bash deploy/local/bench.sh --quick         # ~20 s smoke run
#   bash deploy/local/bench.sh --no-fsync      # ZooKeeper without fsync (forceSync=no)
#   bash deploy/local/bench.sh --workloads w4 --herd-sizes 10,100,1000
#   bash deploy/local/bench.sh --workloads w5  # only the 20,000 waiters on one replica
#   bash deploy/local/bench.sh --no-zk-restart # W5 without its ZooKeeper restart
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
         "$bin/client/bench/turnstile-bare-server"; do
  [ -x "$b" ] || { echo "missing $b: build first (bash deploy/local/build.sh)" >&2; exit 1; }
done

force_sync=yes
zk_restart=1
bench_args=()
for arg in "$@"; do
  case $arg in
    --no-fsync) force_sync=no ;;
    --no-zk-restart) zk_restart=0 ;;
    *) bench_args+=("$arg") ;;
  esac
done
fsync_label=on
[ $force_sync = yes ] || fsync_label=off

source "$top/deploy/local/local-cluster.sh"
cluster_begin
start=$SECONDS
start_zookeeper "" "$force_sync"
start_turnstiled "" --zk-session-timeout 30s --zk-sessions 4 \
  --max-contenders-per-lock 20001 --max-streams 25000 --max-watch-bytes $((900 * 1024))
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
  --zk-fsync "$fsync_label" --server-pid "$ts_pid" --zk-pid "$(current_zk_pid)" \
  --bare-server "$bin/client/bench/turnstile-bare-server" ${restart_args[@]+"${restart_args[@]}"} \
  ${bench_args[@]+"${bench_args[@]}"} || rc=$?
echo
if [ $rc -ne 0 ]; then
  echo "== turnstile-bench exited with $rc; last lines of the replica log:"
  tail -20 "$work/turnstiled.log"
  echo "== last lines of the ZooKeeper log:"
  tail -10 "$work/zk.log"
fi
echo "== wall time $((SECONDS - start)) s; stopping turnstiled and ZooKeeper"
exit $rc
