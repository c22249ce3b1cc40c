#!/usr/bin/env bash
# Take-home check of the Python client (see the contract in tests/take_home):
#   python.sh setup WORK         makes WORK/venv a venv on top of Debian's
#                                python3-grpcio and python3-protobuf
#                                (--system-site-packages) and installs the
#                                package into it as client/python/README.md
#                                tells a user offline:
#                                pip install --no-build-isolation --no-index
#   python.sh run WORK SOURCE    runs SOURCE with the venv's python, from a
#                                fresh directory under WORK; the exit code is
#                                the program's.
# pip builds in the source tree (build/, *.egg-info), so the package is
# installed from a copy of the repository's client/python, protos/ and LICENSE
# (its layout in small) in WORK/src, never from the repository itself. pip's
# cache is $TURNSTILE_CACHE/pip. No network is used.
set -euo pipefail

usage() {
  echo "usage: $0 setup WORK | run WORK SOURCE" >&2
  exit 2
}

src=${TURNSTILE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
python=/usr/bin/python3

setup() {
  local work=$1
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
  rm -rf "$work/src" "$work/venv"
  mkdir -p "$work/src/client/python"
  # The package sources only: no generated stubs or build output an
  # editable install or a local build may have left in the checkout.
  tar -C "$src/client/python" --exclude=./build --exclude=./dist --exclude='./*.egg-info' \
    --exclude=./protos --exclude='lock_pb2*.py' --exclude=__pycache__ -cf - . |
    tar -C "$work/src/client/python" -xf -
  cp -r "$src/protos" "$work/src/protos"
  cp "$src/LICENSE" "$work/src/LICENSE"
  export PIP_CACHE_DIR=${TURNSTILE_CACHE:-$work/cache}/pip
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  "$python" -m venv --system-site-packages "$work/venv"
  "$work/venv/bin/pip" install --quiet --no-build-isolation --no-index "$work/src/client/python"
  # Imported from the venv, not from a source tree: the package, its
  # stubs and its asyncio client.
  (cd "$work" && "$work/venv/bin/python" -c \
    'import turnstile, turnstile.aio, turnstile.v1.lock_pb2 as p
for m in (p, turnstile.aio): assert "/venv/" in m.__file__, m.__file__')
}

run() {
  local work source dir
  work=$(cd "$1" && pwd)
  source=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
  dir=$(mktemp -d "$work/run.XXXXXX")
  cp "$source" "$dir/"
  cd "$dir"
  exec "$work/venv/bin/python" "$(basename "$source")"
}

case "${1:-}" in
  setup) [ $# -eq 2 ] || usage; setup "$2" ;;
  run) [ $# -eq 3 ] || usage; run "$2" "$3" ;;
  *) usage ;;
esac
