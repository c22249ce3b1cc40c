#!/usr/bin/env bash
# The Node.js client's dependencies (client/node), after install-deps.sh:
# Node.js and npm from Debian only where they are missing (a Node.js that
# bundles its own npm conflicts with Debian's npm package), then exactly the
# versions of client/node/package-lock.json (`npm ci`, from npm's cache when
# it has them). Skipped when node_modules is already newer than the lock file.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-node-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get -o Acquire::Retries=3 update -q
  $sudo apt-get -o Acquire::Retries=3 install -y -q --no-install-recommends "${missing[@]}"
fi
cd "$top/client/node"
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
  echo "install-node-deps: client/node/node_modules is up to date ($(node --version))"
  exit 0
fi
echo "install-node-deps: npm ci in client/node ($(node --version), npm $(npm --version))"
npm ci --prefer-offline --no-audit --no-fund
