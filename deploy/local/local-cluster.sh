# Sourced by quickstart.sh and bench.sh: a local ZooKeeper and turnstiled
# replica on loopback, in a temp dir, stopped by PID on exit.
#
#   source deploy/local/local-cluster.sh
#   cluster_begin                     # temp dir in $work, cleanup trap
#   start_zookeeper [PORT] [FSYNC] [JVM_FLAG…]
#                                     # sets zk_port, zk_pid (free port if PORT is taken/absent);
#                                     # FSYNC yes|no is ZooKeeper's forceSync (default no: no
#                                     # fsync per write, for demos on slow disks)
#   restart_zookeeper                 # stops that ZooKeeper by PID and starts it again: same
#                                     # zoo.cfg, port, data dir and JVM flags; sets zk_pid and
#                                     # returns once it answers ruok
#   start_turnstiled [PORT] [FLAGS…]  # sets ts_port, ts_pid; returns once SERVING
#   start_more_turnstiled NAME [FLAGS…]
#                                     # another replica on a free port, metrics on
#                                     # another (log $work/turnstiled-NAME.log), e.g. with TLS; sets
#                                     # more_port, more_pid; stopped on exit like the first.
#                                     # Its health check passes the CLI the flags in the
#                                     # array more_health_flags (e.g. --tls-ca-file F)
#
# Run directly, `bash local-cluster.sh restart-zookeeper WORKDIR` does
# restart_zookeeper for the cluster whose $work is WORKDIR, from another
# process (bench.sh hands it to turnstile-bench as --w5-restart-zk). The
# current ZooKeeper PID is kept in $work/zk.pid, where the cleanup finds it.
# Needs: java (Debian's zookeeper package), nc, python3, and the binaries
# $bin/server/turnstiled and $bin/client/turnstile: $bin is the caller's, else
# $TURNSTILE_BUILD_DIR, else $top/build.
: "${top:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${bin:=${TURNSTILE_BUILD_DIR:-$top/build}}"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port_free() { ! (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Whether a server could listen on the port now (SO_REUSEADDR, as ZooKeeper).
port_bindable() {
  python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

# Whether process $1 runs (a zombie does not: it is gone but for its parent's
# wait, and restart_zookeeper may stop a ZooKeeper another shell started).
pid_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat:0:1}" != Z ]
}

stop_pid() {  # SIGTERM, up to 10 s, then SIGKILL; by PID only
  local pid=$1
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    pid_alive "$pid" || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# ZooKeeper's PID now: restart_zookeeper (maybe run by another process)
# records each new one in $work/zk.pid.
current_zk_pid() { cat "$work/zk.pid" 2>/dev/null || echo "$zk_pid"; }

cluster_begin() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-local.XXXXXX")
  zk_pid="" ts_pid=""
  trap 'stop_more_turnstiled; stop_pid "$ts_pid"; stop_pid "$(current_zk_pid)"; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
}

start_zookeeper() {
  zk_port=${1:-}
  local force_sync=${2:-no}
  shift $(( $# < 2 ? $# : 2 ))
  case $force_sync in
    yes|no) ;;
    *) echo "start_zookeeper: FSYNC must be yes or no, got \"$force_sync\"" >&2; exit 1 ;;
  esac
  { [ -n "$zk_port" ] && port_free "$zk_port"; } || zk_port=$(free_port)
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
forceSync=$force_sync
preAllocSize=1024
CFG
  # The JVM flags, one per line, for restart_zookeeper.
  if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi > "$work/zk.jvm-flags"
  : > "$work/zk.log"
  launch_zookeeper || exit 1
  echo "== ZooKeeper up on 127.0.0.1:$zk_port (pid $zk_pid, forceSync=$force_sync)"
}

# Starts ZooKeeper from $work/zoo.cfg with the JVM flags in $work/zk.jvm-flags
# (its output appended to $work/zk.log), records its PID (zk_pid and
# $work/zk.pid) and waits until it answers ruok on $zk_port. 1 (after the
# log's tail) if it dies first or does not answer within 60 s.
launch_zookeeper() {
  local flags=()
  [ ! -s "$work/zk.jvm-flags" ] || mapfile -t flags < "$work/zk.jvm-flags"
  local cp=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
  cp="$cp:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
  java -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
    -Dzookeeper.admin.enableServer=false ${flags[@]+"${flags[@]}"} -cp "$cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" \
    >> "$work/zk.log" 2>&1 < /dev/null &
  zk_pid=$!
  echo "$zk_pid" > "$work/zk.pid"
  local deadline=$((SECONDS + 60))
  # timeout: a connection accepted while ZooKeeper is still starting may get
  # no reply and no close, and nc would wait on it forever.
  until [ "$(echo ruok | timeout 3 nc -w 2 -q1 127.0.0.1 "$zk_port" 2>/dev/null || true)" = imok ]; do
    kill -0 "$zk_pid" 2>/dev/null || { echo "ZooKeeper failed to start:"; tail -20 "$work/zk.log"; return 1; }
    [ $SECONDS -lt $deadline ] || {
      echo "ZooKeeper did not answer ruok in 60s"; tail -20 "$work/zk.log"; stop_pid "$zk_pid"; return 1
    }
    sleep 0.2
  done
}

restart_zookeeper() {
  zk_pid=$(current_zk_pid)
  zk_port=$(sed -n 's/^clientPort=//p' "$work/zoo.cfg")
  [ -n "$zk_pid" ] && [ -n "$zk_port" ] || { echo "restart_zookeeper: no ZooKeeper in $work" >&2; return 1; }
  local start=$SECONDS attempt log_size new_log deadline
  stop_pid "$zk_pid"
  # Clients keep the address, so the port cannot change. If it cannot be
  # bound yet (another socket holds it for a moment), wait for it and retry.
  for attempt in 1 2 3 4 5; do
    log_size=$(stat -c %s "$work/zk.log")
    launch_zookeeper && break
    new_log=$(tail -c +$((log_size + 1)) "$work/zk.log")
    [[ $new_log == *"Address already in use"* ]] && [ $attempt -lt 5 ] || return 1
    deadline=$((SECONDS + 10))
    until port_bindable "$zk_port" || [ $SECONDS -ge $deadline ]; do sleep 0.1; done
  done
  echo "== ZooKeeper restarted on 127.0.0.1:$zk_port (pid $zk_pid, same zoo.cfg and data dir) in $((SECONDS - start)) s"
}

start_turnstiled() {
  ts_port=${1:-}
  shift || true
  { [ -n "$ts_port" ] && port_free "$ts_port"; } || ts_port=$(free_port)
  "$bin/server/turnstiled" --listen "127.0.0.1:$ts_port" --zk "127.0.0.1:$zk_port" \
    --zk-session-timeout 6s "$@" > "$work/turnstiled.log" 2>&1 &
  ts_pid=$!
  local deadline=$((SECONDS + 30))
  until grep -q "listening on" "$work/turnstiled.log"; do
    kill -0 "$ts_pid" 2>/dev/null || { cat "$work/turnstiled.log"; exit 1; }
    [ $SECONDS -lt $deadline ] || { echo "turnstiled did not start"; cat "$work/turnstiled.log"; exit 1; }
    sleep 0.1
  done
  # Listening is not serving: wait for health SERVING (ZooKeeper session up).
  until "$bin/client/turnstile" --server "127.0.0.1:$ts_port" --rpc-timeout 2s health \
      > /dev/null 2>&1; do
    kill -0 "$ts_pid" 2>/dev/null || { cat "$work/turnstiled.log"; exit 1; }
    [ $SECONDS -lt $deadline ] || { echo "turnstiled not SERVING after 30s"; cat "$work/turnstiled.log"; exit 1; }
    sleep 0.2
  done
  echo "== $(head -1 "$work/turnstiled.log") (pid $ts_pid), SERVING"
}

# Replicas started by start_more_turnstiled, one PID a line in $work/more.pids.
start_more_turnstiled() {
  local name=$1 log
  shift
  log="$work/turnstiled-$name.log"
  more_port=$(free_port)
  "$bin/server/turnstiled" --listen "127.0.0.1:$more_port" --zk "127.0.0.1:$zk_port" \
    --zk-session-timeout 6s --metrics-listen 127.0.0.1:0 "$@" > "$log" 2>&1 &
  more_pid=$!
  echo "$more_pid" >> "$work/more.pids"
  local deadline=$((SECONDS + 30))
  until grep -q "listening on" "$log"; do
    kill -0 "$more_pid" 2>/dev/null || { cat "$log"; exit 1; }
    [ $SECONDS -lt $deadline ] || { echo "turnstiled ($name) did not start"; cat "$log"; exit 1; }
    sleep 0.1
  done
  until "$bin/client/turnstile" --server "127.0.0.1:$more_port" ${more_health_flags[@]+"${more_health_flags[@]}"} \
      --rpc-timeout 2s health > /dev/null 2>&1; do
    kill -0 "$more_pid" 2>/dev/null || { cat "$log"; exit 1; }
    [ $SECONDS -lt $deadline ] || { echo "turnstiled ($name) not SERVING after 30s"; cat "$log"; exit 1; }
    sleep 0.2
  done
  echo "== $name: $(grep -m1 "listening on" "$log") (pid $more_pid), SERVING"
}

stop_more_turnstiled() {
  local pid
  [ -f "$work/more.pids" ] || return 0
  while read -r pid; do stop_pid "$pid"; done < "$work/more.pids"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    restart-zookeeper)
      work=${2:-}
      [ -f "$work/zoo.cfg" ] || { echo "usage: bash $0 restart-zookeeper WORKDIR (a cluster's \$work)" >&2; exit 2; }
      restart_zookeeper
      ;;
    *)
      echo "usage: bash $0 restart-zookeeper WORKDIR (or source it: see the top of this file)" >&2
      exit 2
      ;;
  esac
fi
