#!/usr/bin/env bash
# Generates the Go stubs of lock.proto into client/go/turnstilepb (ignored
# by git), for module-mode builds with go.mod. build.sh does the same into
# its own GOPATH tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
pkg=turnstile/client/go
mkdir -p "$here/turnstilepb"
protoc -I "$top/protos" \
  --go_out="$here/turnstilepb" --go_opt=paths=source_relative \
  --go_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  --go-grpc_out="$here/turnstilepb" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mturnstile/v1/lock.proto=$pkg/turnstilepb \
  "$top/protos/turnstile/v1/lock.proto"
mv -f "$here/turnstilepb/turnstile/v1/"*.go "$here/turnstilepb/"
rm -rf "$here/turnstilepb/turnstile"
