#!/usr/bin/env bash
# Configures and builds turnstile into ./build (2 parallel jobs).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$top/build" -j2
