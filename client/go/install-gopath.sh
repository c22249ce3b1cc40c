#!/usr/bin/env bash
# Puts the Go client library, with its committed gRPC stubs, into a GOPATH
# tree, for programs built in GOPATH mode with Debian's Go (1.19) against
# Debian's gRPC and protobuf packages (/usr/share/gocode):
#
#   client/go/install-gopath.sh DIR
#
# makes DIR/src/turnstile/client/go (the import path "turnstile/client/go")
# and DIR/src/turnstile/client/go/turnstilepb (the stubs of lock.proto).
# Then build with:
#   GO111MODULE=off GOPATH=DIR:/usr/share/gocode go build
# Needs no protoc: the stubs are committed (regenerate-stubs.sh).
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
find "$src" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
excludes=(--exclude=./go.mod --exclude=./go.sum --exclude='./*.sh' --exclude=./README.md)
if [ -z "$tests" ]; then excludes+=(--exclude='*_test.go'); fi
(cd "$here" && tar "${excludes[@]}" -cf - .) | (cd "$src" && tar -xf -)
cp "$top/LICENSE" "$src/LICENSE"
