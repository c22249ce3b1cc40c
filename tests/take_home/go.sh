#!/usr/bin/env bash
# The Go take-home consumer (tests/take_home): a program outside the
# repository built the way client/go/README.md tells a user to, with
# Debian's Go 1.19 in GOPATH mode against /usr/share/gocode.
#   go.sh setup WORK          WORK/gopath gets the library and its stubs
#                             (client/go/install-gopath.sh); the library is
#                             compiled once into the build cache
#   go.sh run WORK SOURCE     builds SOURCE (package main) and runs it
# The Go build cache is $TURNSTILE_CACHE/go-build (kept between runs).
set -euo pipefail
mode=${1:?usage: go.sh setup WORK | go.sh run WORK SOURCE}
work=${2:?usage: go.sh setup WORK | go.sh run WORK SOURCE}
: "${TURNSTILE_SRC:?}"
mkdir -p "$work"
work=$(cd "$work" && pwd)
export GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOFLAGS= GOENV=off \
       GOPROXY=off CGO_ENABLED=0
export GOCACHE="${TURNSTILE_CACHE:-$work/cache}/go-build"
mkdir -p "$GOCACHE"
case "$mode" in
  setup)
    "$TURNSTILE_SRC/client/go/install-gopath.sh" "$work/gopath"
    go build turnstile/client/go
    ;;
  run)
    source=${3:?usage: go.sh run WORK SOURCE}
    dir=$(mktemp -d "$work/run.XXXXXX")
    cp "$source" "$dir/main.go"
    cd "$dir"
    go build -o prog .
    exec ./prog
    ;;
  *) echo "go.sh: unknown mode $mode" >&2; exit 2 ;;
esac
