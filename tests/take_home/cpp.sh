#!/usr/bin/env bash
# The C++ take-home consumer through CMake (tests/take_home): a project
# outside the repository that finds the installed library the way
# client/lib/README.md tells a user to:
#   find_package(turnstile CONFIG REQUIRED) + turnstile::client,
#   configured with -DCMAKE_PREFIX_PATH=$TURNSTILE_PREFIX.
#   cpp.sh setup WORK          writes WORK/CMakeLists.txt and configures WORK/build
#   cpp.sh run WORK SOURCE     builds SOURCE as the project's main.cc, runs it
# Build output goes to stderr; the program's stdout is its own.
set -euo pipefail
mode=${1:?usage: cpp.sh setup WORK | cpp.sh run WORK SOURCE}
work=${2:?usage: cpp.sh setup WORK | cpp.sh run WORK SOURCE}
: "${TURNSTILE_PREFIX:?}"
work=$(cd "$work" && pwd)
case "$mode" in
  setup)
    cat > "$work/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(turnstile_consumer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
find_package(turnstile CONFIG REQUIRED)
add_executable(main main.cc)
target_link_libraries(main PRIVATE turnstile::client)
CMAKE
    # A program that only checks the headers, until `run` brings one.
    printf '#include <turnstile/client.h>\n#include <turnstile/coordination.h>\n#include <turnstile/tls.h>\nint main() { return 0; }\n' \
      > "$work/main.cc"
    cmake -S "$work" -B "$work/build" -DCMAKE_PREFIX_PATH="$TURNSTILE_PREFIX" \
      -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build "$work/build" >&2
    ;;
  run)
    source=${3:?usage: cpp.sh run WORK SOURCE}
    exec 9> "$work/.run.lock"
    flock 9  # one run at a time in WORK (they share main.cc)
    cp "$source" "$work/main.cc"
    touch "$work/main.cc"
    cmake --build "$work/build" >&2
    exec 9>&-
    exec "$work/build/main"
    ;;
  *) echo "cpp.sh: unknown mode $mode" >&2; exit 2 ;;
esac
