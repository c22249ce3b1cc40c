#!/usr/bin/env bash
# Builds the Go client library (client/go) offline in GOPATH mode against
# Debian's packaged Go modules (/usr/share/gocode: golang-google-grpc-dev,
# golang-google-protobuf-dev), issue 22.
#
#   client/go/build.sh OUTDIR          stubs + library + conformance runner
#   client/go/build.sh OUTDIR test     ... and then `go test` of the library
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
mkdir -p "$src" "$out/bin" "$out/cache"
# A fresh copy of the sources (no symlinks: the go tool resolves them badly).
find "$src" -mindepth 1 -maxdepth 1 ! -name turnstilepb -exec rm -rf {} +
(cd "$here" && tar --exclude=./go.mod --exclude=./go.sum -cf - .) | (cd "$src" && tar -xf -)
mkdir -p "$src/turnstilepb"
protoc -I "$top/protos" \
  --go_out="$src/turnstilepb" --go_opt=paths=source_relative \
  --go_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  --go-grpc_out="$src/turnstilepb" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  "$top/protos/turnstile/v1/lock.proto"
mv -f "$src/turnstilepb/turnstile/v1/"*.go "$src/turnstilepb/"
rm -rf "$src/turnstilepb/turnstile"
export GO111MODULE=off GOPATH="$out/gopath:/usr/share/gocode" GOPROXY=off \
       GOFLAGS= GOCACHE="$out/cache" GOTOOLCHAIN=local CGO_ENABLED=0
cd "$src"
go build ./...
go build -o "$out/bin/conformance-runner" ./cmd/conformance-runner
go vet ./... >&2 || { echo "go vet failed" >&2; exit 1; }
if [ "$mode" = test ]; then
  go test -count=1 ./...
fi
