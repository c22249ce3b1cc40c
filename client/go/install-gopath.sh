#!/usr/bin/env bash
# Puts the Go client library, with its generated gRPC stubs, into a GOPATH
# tree, for programs built in GOPATH mode with Debian's Go (1.19) against
# Debian's gRPC and protobuf packages (/usr/share/gocode):
#
#   client/go/install-gopath.sh DIR
#
# makes DIR/src/turnstile/client/go (the import path "turnstile/client/go")
# and DIR/src/turnstile/client/go/turnstilepb (the stubs of lock.proto).
# Then build with:
#   GO111MODULE=off GOPATH=DIR:/usr/share/gocode go build
# Needs protoc, protoc-gen-go and protoc-gen-go-grpc (Debian's
# protobuf-compiler, protoc-gen-go, protoc-gen-go-grpc).
#
# --with-tests also copies the library's tests and test data (client/go/build.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tests=
if [ "${1:-}" = --with-tests ]; then tests=1; shift; fi
dir=${1:?usage: install-gopath.sh [--with-tests] DIR}
pkg=turnstile/client/go
mkdir -p "$dir"
src="$(cd "$dir" && pwd)/src/$pkg"
mkdir -p "$src"
# A fresh copy of the sources (no symlinks: the go tool resolves them badly).
# go.mod is left out: in GOPATH mode the directory is a plain package.
find "$src" -mindepth 1 -maxdepth 1 ! -name turnstilepb -exec rm -rf {} +
excludes=(--exclude=./go.mod --exclude=./go.sum --exclude=./turnstilepb --exclude='./*.sh'
          --exclude=./README.md --exclude=./.gitignore)
if [ -z "$tests" ]; then excludes+=(--exclude='*_test.go'); fi
(cd "$here" && tar "${excludes[@]}" -cf - .) | (cd "$src" && tar -xf -)
cp "$top/LICENSE" "$src/LICENSE"
# The stubs, written aside and then moved in: lock.proto stays untouched,
# its Go package is given with --go_opt=M / --go-grpc_opt=M.
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
protoc -I "$top/protos" \
  --go_out="$gen" --go_opt=paths=source_relative \
  --go_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  --go-grpc_out="$gen" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  "$top/protos/turnstile/v1/lock.proto"
mkdir -p "$src/turnstilepb"
rm -f "$src/turnstilepb/"*.go
mv -f "$gen/turnstile/v1/"*.go "$src/turnstilepb/"
