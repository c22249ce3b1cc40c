#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the Debian packages,
# builds, and runs every test. The tests start their own ZooKeeper servers
# (loopback, free ports, temp dirs) and stop them by PID.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/deploy/local/install-deps.sh"
# The Node.js client's npm packages (client/node, from its lock file).
bash "$top/deploy/local/install-node-deps.sh"
bash "$top/deploy/local/build.sh"
cd "$top/build"
ctest --output-on-failure --timeout 900 "$@"
