#!/usr/bin/env bash
# The Go stubs of protos/turnstile/v1/lock.proto, client/go/turnstilepb/*.pb.go,
# are generated once and committed, as etcd and most Go gRPC projects do, so
# that building the library needs no protoc. After changing lock.proto:
#
#   client/go/regenerate-stubs.sh            rewrites client/go/turnstilepb/*.pb.go
#   client/go/regenerate-stubs.sh --check    regenerates into a temporary directory
#                                            and fails, naming the files, if the
#                                            committed ones differ (ctest
#                                            go_client_stubs_test)
#
# Only the generators the stubs were made with will do, Debian bookworm's:
# protoc (protobuf-compiler), protoc-gen-go v1.28.1 (package protoc-gen-go)
# and protoc-gen-go-grpc 1.0 (package protoc-gen-go-grpc, from gRPC-Go 1.33).
# Others write other code: protoc-gen-go 1.3 (package protoc-gen-go-1-3,
# which golang-etcd-server-dev installs in place of 1.28) even puts it in
# another Go package. With any other generator the script refuses, and
# --check exits 77 (ctest: skipped), saying what it found.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
pkg=turnstile/client/go/turnstilepb
want_go="protoc-gen-go v1.28.1"
want_grpc="protoc-gen-go-grpc 1.0"
check=
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: regenerate-stubs.sh [--check]" >&2; exit 2 ;;
esac

# What `TOOL --version` says, or why it says nothing useful. protoc-gen-go 1.3
# has no --version: it reads a request from stdin (given none, it answers
# with an empty response or an error), hence the empty stdin and the timeout.
tool_version() {
  local path out owner
  path=$(command -v "$1") || { echo "not installed"; return; }
  out=$(timeout 10 "$1" --version </dev/null 2>/dev/null | head -n 1 | tr -cd '[:print:]') || true
  if [[ "$out" =~ ^$1\ v?[0-9] ]]; then echo "$out"; return; fi
  owner=$(dpkg-query -S "$path" 2>/dev/null | cut -d: -f1) || true
  echo "a $1 without --version (${owner:+package $owner: }not $2)"
}

found_go=$(tool_version protoc-gen-go "$want_go")
found_grpc=$(tool_version protoc-gen-go-grpc "$want_grpc")
if ! command -v protoc >/dev/null || [ "$found_go" != "$want_go" ] || [ "$found_grpc" != "$want_grpc" ]; then
  why="needs protoc, $want_go and $want_grpc (Debian: protobuf-compiler protoc-gen-go protoc-gen-go-grpc); found protoc: $(command -v protoc || echo 'not installed'), protoc-gen-go: $found_go, protoc-gen-go-grpc: $found_grpc"
  if [ -n "$check" ]; then
    echo "SKIPPED: cannot check client/go/turnstilepb: $why"
    exit 77
  fi
  echo "regenerate-stubs.sh: $why" >&2
  exit 1
fi

gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
# lock.proto names no Go package (go_package): M gives it.
protoc -I "$top/protos" \
  --go_out="$gen" --go_opt=paths=source_relative --go_opt=Mturnstile/v1/lock.proto=$pkg \
  --go-grpc_out="$gen" --go-grpc_opt=paths=source_relative --go-grpc_opt=Mturnstile/v1/lock.proto=$pkg \
  "$top/protos/turnstile/v1/lock.proto"
new="$gen/turnstile/v1"

if [ -z "$check" ]; then
  rm -f "$here/turnstilepb/"*.pb.go
  mkdir -p "$here/turnstilepb"
  cp "$new/"*.pb.go "$here/turnstilepb/"
  echo "regenerated: $(cd "$here/turnstilepb" && echo *.pb.go) in client/go/turnstilepb; commit them"
  exit 0
fi

# The header line "protoc vX" records protoc's version only; another protoc
# that writes the same code passes.
strip_protoc_version() { sed '/^\/\/[[:space:]]*protoc[[:space:]]\+v[0-9]/d' "$1"; }
shopt -s nullglob
names=$(for f in "$new/"*.pb.go "$here/turnstilepb/"*.pb.go; do basename "$f"; done | sort -u)
stale=()
for f in $names; do
  committed="$here/turnstilepb/$f"
  if [ ! -f "$new/$f" ]; then
    echo "client/go/turnstilepb/$f: lock.proto no longer generates it"
  elif [ ! -f "$committed" ]; then
    echo "client/go/turnstilepb/$f: missing"
  elif diff -u --label "committed $f" --label "generated $f" \
         <(strip_protoc_version "$committed") <(strip_protoc_version "$new/$f") >"$gen/diff"; then
    continue
  else
    echo "client/go/turnstilepb/$f differs from what lock.proto generates:"
    head -n 40 "$gen/diff"
  fi
  stale+=("$f")
done
if [ ${#stale[@]} -gt 0 ]; then
  echo "FAILED: client/go/turnstilepb is stale (${stale[*]}): regenerate the stubs with"
  echo "client/go/regenerate-stubs.sh and commit them."
  exit 1
fi
echo "PASSED: client/go/turnstilepb/*.pb.go are what $want_go and $want_grpc generate from lock.proto"
