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

source "$top/deploy/local/local-cluster.sh"
cluster_begin
start_zookeeper 2181
start_turnstiled 7400

cli="$bin/client/turnstile --server 127.0.0.1:$ts_port"
echo
echo "== alice takes lock 'demo' and holds it for 3s:"
echo "   \$ turnstile --owner alice acquire demo --hold 3s"
$cli --owner alice acquire demo --hold 3s > "$work/alice.out" 2>&1 &
alice=$!
deadline=$((SECONDS + 20))
until grep -q ACQUIRED "$work/alice.out"; do
  [ $SECONDS -lt $deadline ] || { cat "$work/alice.out"; exit 1; }
  sleep 0.05
done
sed 's/^/   /' "$work/alice.out"
echo "== bob queues behind her (waits up to 10s, holds 1s):"
echo "   \$ turnstile --owner bob acquire demo --wait 10s --hold 1s"
$cli --owner bob acquire demo --wait 10s --hold 1s > "$work/bob.out" 2>&1 &
bob=$!
deadline=$((SECONDS + 20))
until $cli describe demo 2>/dev/null | grep -q WAITER; do
  [ $SECONDS -lt $deadline ] || { cat "$work/bob.out"; exit 1; }
  sleep 0.05
done
echo "== who holds and who waits:"
echo "   \$ turnstile describe demo"
$cli describe demo | sed 's/^/   /'
echo "== carol tries once (wait 0) and is refused while alice holds it:"
echo "   \$ turnstile --owner carol acquire demo --wait 0      (exit code 75: not acquired)"
$cli --owner carol acquire demo --wait 0 2>&1 | sed 's/^/   /' || true
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
