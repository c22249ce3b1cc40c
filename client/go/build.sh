#!/usr/bin/env bash
# Builds the Go client library (client/go) offline in GOPATH mode against
# Debian's packaged Go modules (/usr/share/gocode: golang-google-grpc-dev,
# golang-google-protobuf-dev), issue 22.
#
#   client/go/build.sh OUTDIR          stubs + library + conformance runner
#   client/go/build.sh OUTDIR test     `go test` of the library built there
#                                      (ctest go_client_unit_test; no server)
#   client/go/build.sh OUTDIR live     its live tests only, against the
#                                      replicas named by TURNSTILE_LIVE_*
#                                      (tests/go_live_test.py)
#
# OUTDIR gets: gopath/src/turnstile/client/go (a copy of this directory plus
# the generated stubs in turnstilepb/), bin/conformance-runner, cache/ (the
# Go build cache). lock.proto stays untouched: its Go package is given with
# --go_opt=M / --go-grpc_opt=M.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUTDIR [test]}
mode=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
pkg=turnstile/client/go
src="$out/gopath/src/$pkg"
export GO111MODULE=off GOPATH="$out/gopath:/usr/share/gocode" GOPROXY=off \
       GOFLAGS= GOCACHE="$out/cache" GOENV=off GOTOOLCHAIN=local CGO_ENABLED=0
if [ "$mode" = test ] || [ "$mode" = live ]; then
  [ -d "$src/turnstilepb" ] || { echo "build.sh: $src not built: run build.sh $out first" >&2; exit 1; }
  cd "$src"
  if [ "$mode" = live ]; then
    exec go test -count=1 -v -run '^TestLive' .
  fi
  # The live tests skip themselves here (no TURNSTILE_LIVE_* replicas).
  exec env -u TURNSTILE_LIVE_A -u TURNSTILE_LIVE_B -u TURNSTILE_LIVE_MULTI -u TURNSTILE_LIVE_CAPPED go test -count=1 ./...
fi
mkdir -p "$src" "$out/bin" "$out/cache"
# A fresh copy of the sources (no symlinks: the go tool resolves them badly).
find "$src" -mindepth 1 -maxdepth 1 ! -name turnstilepb -exec rm -rf {} +
(cd "$here" && tar --exclude=./go.mod --exclude=./go.sum --exclude=./turnstilepb --exclude=./gen-stubs.sh -cf - .) | (cd "$src" && tar -xf -)
mkdir -p "$src/turnstilepb"
protoc -I "$top/protos" \
  --go_out="$src/turnstilepb" --go_opt=paths=source_relative \
  --go_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  --go-grpc_out="$src/turnstilepb" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  "$top/protos/turnstile/v1/lock.proto"
mv -f "$src/turnstilepb/turnstile/v1/"*.go "$src/turnstilepb/"
rm -rf "$src/turnstilepb/turnstile"
cd "$src"
go build ./...
# Built aside and renamed: a runner still running keeps its old file.
go build -o "$out/bin/.conformance-runner.new" ./cmd/conformance-runner
mv -f "$out/bin/.conformance-runner.new" "$out/bin/conformance-runner"
go build -o "$out/bin/.example.new" ./cmd/example
mv -f "$out/bin/.example.new" "$out/bin/turnstile-go-example"
go vet ./...
touch "$out/build.stamp"
