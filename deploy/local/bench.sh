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

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

work=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-bench.XXXXXX")
zk_pid="" ts_pid=""
stop_pid() {  # SIGTERM, up to 10 s, then SIGKILL; by PID only
  local pid=$1
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop_pid "$ts_pid"
  stop_pid "$zk_pid"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
zk_port=$(free_port)
mkdir -p "$work/zk"
cat > "$work/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$work/zk
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
forceSync=no
preAllocSize=1024
CFG
cp=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
if [ -r /usr/share/java/slf4j-log4j12.jar ] && [ -r /usr/share/java/log4j-1.2.jar ]; then
  cp="$cp:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
else
  cp="$cp:/usr/share/java/*"
fi
java -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
  -Dzookeeper.admin.enableServer=false -cp "$cp" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" > "$work/zk.log" 2>&1 &
zk_pid=$!
deadline=$((SECONDS + 60))
until [ "$(echo ruok | nc -q1 127.0.0.1 "$zk_port" 2>/dev/null || true)" = imok ]; do
  kill -0 "$zk_pid" 2>/dev/null || { echo "ZooKeeper failed to start:"; tail -20 "$work/zk.log"; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "ZooKeeper did not answer ruok in 60s"; tail -20 "$work/zk.log"; exit 1; }
  sleep 0.2
done
echo "== ZooKeeper up on 127.0.0.1:$zk_port (pid $zk_pid)"

ts_port=$(free_port)
"$bin/server/turnstiled" --listen "127.0.0.1:$ts_port" --zk "127.0.0.1:$zk_port" \
  --zk-session-timeout 6s --max-contenders-per-lock 2000 > "$work/turnstiled.log" 2>&1 &
ts_pid=$!
deadline=$((SECONDS + 30))
until grep -q "listening on" "$work/turnstiled.log"; do
  kill -0 "$ts_pid" 2>/dev/null || { cat "$work/turnstiled.log"; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "turnstiled did not start"; cat "$work/turnstiled.log"; exit 1; }
  sleep 0.1
done
echo "== $(head -1 "$work/turnstiled.log") (pid $ts_pid, --max-contenders-per-lock 2000)"
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
