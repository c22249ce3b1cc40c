# Sourced by quickstart.sh and bench.sh: a local ZooKeeper and turnstiled
# replica on loopback, in a temp dir, stopped by PID on exit.
#
#   source deploy/local/local-cluster.sh
#   cluster_begin                     # temp dir in $work, cleanup trap
#   start_zookeeper [PORT] [FSYNC] [JVM_FLAG…]
#                                     # sets zk_port, zk_pid (free port if PORT is taken/absent);
#                                     # FSYNC yes|no is ZooKeeper's forceSync (default no: no
#                                     # fsync per write, for demos on slow disks)
#   start_turnstiled [PORT] [FLAGS…]  # sets ts_port, ts_pid; returns once SERVING
# Needs: java (Debian's zookeeper package), nc, python3, and the binaries
# $bin/server/turnstiled and $bin/client/turnstile: $bin is the caller's, else
# $TURNSTILE_BUILD_DIR, else $top/build.
: "${bin:=${TURNSTILE_BUILD_DIR:-$top/build}}"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port_free() { ! (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

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

cluster_begin() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-local.XXXXXX")
  zk_pid="" ts_pid=""
  trap 'stop_pid "$ts_pid"; stop_pid "$zk_pid"; rm -rf "$work"' EXIT
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
  local cp=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
  cp="$cp:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
  java -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
    -Dzookeeper.admin.enableServer=false "$@" -cp "$cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" > "$work/zk.log" 2>&1 &
  zk_pid=$!
  local deadline=$((SECONDS + 60))
  # timeout: a connection accepted while ZooKeeper is still starting may get
  # no reply and no close, and nc would wait on it forever.
  until [ "$(echo ruok | timeout 3 nc -w 2 -q1 127.0.0.1 "$zk_port" 2>/dev/null || true)" = imok ]; do
    kill -0 "$zk_pid" 2>/dev/null || { echo "ZooKeeper failed to start:"; tail -20 "$work/zk.log"; exit 1; }
    [ $SECONDS -lt $deadline ] || { echo "ZooKeeper did not answer ruok in 60s"; tail -20 "$work/zk.log"; exit 1; }
    sleep 0.2
  done
  echo "== ZooKeeper up on 127.0.0.1:$zk_port (pid $zk_pid, forceSync=$force_sync)"
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
