#!/usr/bin/env bash
# Builds the Go client library (client/go) offline in GOPATH mode against
# Debian's packaged Go modules (/usr/share/gocode: golang-google-grpc-dev,
# golang-google-protobuf-dev), issue 22.
#
#   client/go/build.sh OUTDIR          library + conformance runner
#   client/go/build.sh OUTDIR test     `go test` of the library built there
#                                      (ctest go_client_unit_test; no server)
#   client/go/build.sh OUTDIR live     its live tests only, against the
#                                      replicas named by TURNSTILE_LIVE_*
#                                      (tests/go_live_test.py)
#
# OUTDIR gets: gopath/src/turnstile/client/go (a copy of this directory with
# its committed stubs in turnstilepb/, by install-gopath.sh),
# bin/conformance-runner, bin/turnstile-go-example, cache/ (the Go build
# cache).
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
mkdir -p "$out/bin" "$out/cache"
# The sources, their tests and the stubs, as a user's GOPATH gets them.
"$here/install-gopath.sh" --with-tests "$out/gopath"
cd "$src"
go build ./...
# Built aside and renamed: a runner still running keeps its old file.
go build -o "$out/bin/.conformance-runner.new" ./cmd/conformance-runner
mv -f "$out/bin/.conformance-runner.new" "$out/bin/conformance-runner"
go build -o "$out/bin/.example.new" ./cmd/example
mv -f "$out/bin/.example.new" "$out/bin/turnstile-go-example"
go vet ./...
touch "$out/build.stamp"
