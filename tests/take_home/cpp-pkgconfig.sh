#!/usr/bin/env bash
# The C++ take-home consumer through pkg-config (tests/take_home): a program
# outside the repository compiled the way client/lib/README.md tells a user
# to:
#   PKG_CONFIG_PATH=$TURNSTILE_PREFIX/lib/pkgconfig
#   g++ -std=c++17 main.cc $(pkg-config --cflags --libs turnstile) -o main
#   cpp-pkgconfig.sh setup WORK        checks that pkg-config finds turnstile
#   cpp-pkgconfig.sh run WORK SOURCE   compiles SOURCE (as WORK/run.N/main.cc), runs it
# Compiler output goes to stderr; the program's stdout is its own.
set -euo pipefail
mode=${1:?usage: cpp-pkgconfig.sh setup WORK | cpp-pkgconfig.sh run WORK SOURCE}
work=${2:?usage: cpp-pkgconfig.sh setup WORK | cpp-pkgconfig.sh run WORK SOURCE}
: "${TURNSTILE_PREFIX:?}"
work=$(cd "$work" && pwd)
export PKG_CONFIG_PATH="$TURNSTILE_PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
case "$mode" in
  setup)
    pkg-config --exists --print-errors turnstile
    echo "turnstile $(pkg-config --modversion turnstile): $(pkg-config --variable=prefix turnstile)" >&2
    ;;
  run)
    source=${3:?usage: cpp-pkgconfig.sh run WORK SOURCE}
    dir=$(mktemp -d "$work/run.XXXXXX")
    cp "$source" "$dir/main.cc"
    cd "$dir"
    # shellcheck disable=SC2046  # pkg-config's words are separate flags
    g++ -std=c++17 -O1 main.cc $(pkg-config --cflags --libs turnstile) -o main >&2
    exec ./main
    ;;
  *) echo "cpp-pkgconfig.sh: unknown mode $mode" >&2; exit 2 ;;
esac
