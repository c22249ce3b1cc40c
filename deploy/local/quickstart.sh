#!/usr/bin/env bash
# Runs turnstile for real on this machine: installs packages, builds, starts a
# local ZooKeeper (temp dir, loopback), starts one turnstiled replica, takes a
# lock with the CLI, then keeps both running until Ctrl-C (or exits after the
# demo with --once). Everything it started is stopped by PID on exit.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
once=0
[ "${1:-}" = "--once" ] && once=1

bash "$top/deploy/local/install-deps.sh"
bash "$top/deploy/local/build.sh"
bin="$top/build"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port_free() { ! (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

work=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-quickstart.XXXXXX")
zk_pid="" ts_pid=""
cleanup() {
  [ -n "$ts_pid" ] && kill "$ts_pid" 2>/dev/null && wait "$ts_pid" 2>/dev/null || true
  [ -n "$zk_pid" ] && kill "$zk_pid" 2>/dev/null && wait "$zk_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

zk_port=2181
port_free $zk_port || zk_port=$(free_port)
mkdir -p "$work/zk"
cat > "$work/zoo.cfg" <<CFG
tickTime=500
dataDir=$work/zk
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
CFG
java -Xmx256m -cp '/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar' \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" > "$work/zk.log" 2>&1 &
zk_pid=$!
deadline=$((SECONDS + 60))
until [ "$(echo ruok | nc -q1 127.0.0.1 $zk_port 2>/dev/null || true)" = imok ]; do
  kill -0 $zk_pid 2>/dev/null || { echo "ZooKeeper failed to start:"; tail -20 "$work/zk.log"; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "ZooKeeper did not answer ruok in 60s"; exit 1; }
  sleep 0.2
done
echo "== ZooKeeper up on 127.0.0.1:$zk_port (pid $zk_pid)"

ts_port=7400
port_free $ts_port || ts_port=$(free_port)
"$bin/server/turnstiled" --listen "127.0.0.1:$ts_port" --zk "127.0.0.1:$zk_port" \
  --zk-session-timeout 6s > "$work/turnstiled.log" 2>&1 &
ts_pid=$!
deadline=$((SECONDS + 30))
until grep -q "listening on" "$work/turnstiled.log"; do
  kill -0 $ts_pid 2>/dev/null || { cat "$work/turnstiled.log"; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "turnstiled did not start"; exit 1; }
  sleep 0.1
done
echo "== $(head -1 "$work/turnstiled.log")"

cli="$bin/client/turnstile --server 127.0.0.1:$ts_port"
echo
echo "== alice takes lock 'demo' and holds it for 3s:"
echo "   \$ turnstile acquire demo --owner alice --hold 3s"
$cli acquire demo --owner alice --hold 3s > "$work/alice.out" 2>&1 &
alice=$!
deadline=$((SECONDS + 20))
until grep -q ACQUIRED "$work/alice.out"; do
  [ $SECONDS -lt $deadline ] || { cat "$work/alice.out"; exit 1; }
  sleep 0.05
done
sed 's/^/   /' "$work/alice.out"
echo "== bob queues behind her (waits up to 10s, holds 1s):"
echo "   \$ turnstile acquire demo --owner bob --wait 10s --hold 1s"
$cli acquire demo --owner bob --wait 10s --hold 1s > "$work/bob.out" 2>&1 &
bob=$!
until grep -q QUEUED "$work/bob.out"; do sleep 0.05; done
echo "== who holds and who waits:"
echo "   \$ turnstile describe demo"
$cli describe demo | sed 's/^/   /'
echo "== carol tries once (wait 0) and is refused while alice holds it:"
echo "   \$ turnstile acquire demo --owner carol --wait 0"
$cli acquire demo --owner carol --wait 0 2>&1 | sed 's/^/   /' || true
wait $alice $bob
echo "== alice released after 3s; bob was granted next (a larger fencing token):"
sed 's/^/   alice: /' "$work/alice.out"
sed 's/^/   bob:   /' "$work/bob.out"

echo
if [ $once = 1 ]; then
  echo "== demo done; stopping turnstiled and ZooKeeper"
  exit 0
fi
cat <<MSG
== turnstile is running: gRPC on 127.0.0.1:$ts_port, ZooKeeper on 127.0.0.1:$zk_port
   $bin/client/turnstile --server 127.0.0.1:$ts_port acquire my-lock     (Ctrl-C releases)
   $bin/client/turnstile --server 127.0.0.1:$ts_port list
   Logs: $work/turnstiled.log  $work/zk.log
   Press Ctrl-C to stop both.
MSG
wait $ts_pid
