#!/usr/bin/env bash
# Take-home check of the Node.js client (see the contract in tests/take_home):
#   node.sh setup WORK         packs client/node as client/node/README.md tells
#                              a user (npm pack), then makes WORK an npm project
#                              with that tarball installed (npm install).
#   node.sh run WORK SOURCE    copies SOURCE (.js: CommonJS, .mjs: ES module)
#                              into WORK and runs it with node; exit code is the
#                              program's.
# The package is packed from a copy of the repository's client/node, protos/
# and LICENSE in a temporary directory, so nothing is written into the
# repository. npm's cache is $TURNSTILE_CACHE/npm (the registry is needed once,
# for @grpc/grpc-js and @grpc/proto-loader; later runs are served offline).
set -euo pipefail

usage() {
  echo "usage: $0 setup WORK | run WORK SOURCE" >&2
  exit 2
}

src=${TURNSTILE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
cache=${TURNSTILE_CACHE:-${TMPDIR:-/tmp}/turnstile-take-home-node-cache}
npm_flags=(--cache "$cache/npm" --prefer-offline --no-audit --no-fund --loglevel=error)

setup() {
  local work=$1
  mkdir -p "$work" "$cache"
  work=$(cd "$work" && pwd)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-node-pack.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # The repository's layout in small: client/node without node_modules (or
  # what a local pack left there), beside protos/ and LICENSE, which the
  # package's prepack script copies in.
  mkdir -p "$tmp/client/node"
  tar -C "$src/client/node" --exclude=./node_modules --exclude=./protos --exclude=./LICENSE \
    --exclude='./*.tgz' -cf - . | tar -C "$tmp/client/node" -xf -
  cp -r "$src/protos" "$tmp/protos"
  cp "$src/LICENSE" "$tmp/LICENSE"
  local tgz
  # --ignore-scripts=false: the prepack script must run whatever npmrc says.
  tgz=$(cd "$tmp/client/node" &&
    npm pack "${npm_flags[@]}" --ignore-scripts=false --pack-destination "$work" | tail -n 1)
  [ -f "$work/$tgz" ] || { echo "node.sh: npm pack made no $work/$tgz" >&2; exit 1; }
  tar -tzf "$work/$tgz" | grep -x 'package/protos/turnstile/v1/lock.proto' >/dev/null ||
    { echo "node.sh: $tgz has no protos/turnstile/v1/lock.proto" >&2; exit 1; }
  # An empty project, then the tarball, as the README says.
  (cd "$work" && npm init -y "${npm_flags[@]}" >/dev/null &&
    npm install "${npm_flags[@]}" "./$tgz")
  echo "node.sh: $work has $tgz installed ($(node --version), npm $(npm --version))"
}

run() {
  local work=$1 source=$2
  [ -f "$source" ] || { echo "node.sh: no such file: $source" >&2; exit 2; }
  [ -d "$work/node_modules/turnstile-client" ] || { echo "node.sh: run '$0 setup $work' first" >&2; exit 2; }
  local name
  name=$(basename "$source")
  case "$name" in
    *.js | *.mjs | *.cjs) ;;
    *) echo "node.sh: $source is neither .js, .mjs nor .cjs" >&2; exit 2 ;;
  esac
  cp "$source" "$work/$name"
  cd "$work"
  exec node "$name"
}

case "${1:-}" in
  setup) [ $# -eq 2 ] || usage; setup "$2" ;;
  run) [ $# -eq 3 ] || usage; run "$2" "$3" ;;
  *) usage ;;
esac
