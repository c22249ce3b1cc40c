#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each one.
#
#   bash tests/fuzz/run_fuzzers.sh BUILD_DIR [SECONDS|runs=N] [TARGET...]
#
# SECONDS (default 60): each target runs that long (the test suite's
# `fuzz_smoke` entry: 30 s each, two at a time). runs=N: each target runs N
# executions instead (e.g. runs=10000000 for the 10-million check). Seeds
# come from tests/fuzz/corpus/<target>/ (read only); what a run discovers
# goes to BUILD_DIR/corpus/<target>/ and is kept for the next run. A crash,
# leak or sanitizer report fails the run and leaves the input in
# BUILD_DIR/artifacts/<target>/ (reproduce: BUILD_DIR/<target> FILE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS|runs=N] [TARGET...]}
budget=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_lock_name fuzz_lease_id fuzz_flags fuzz_acquire_open fuzz_authz_policy)
mkdir -p "$build"
build=$(cd "$build" && pwd)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j2 --target "${targets[@]}" >/dev/null
if [[ $budget == runs=* ]]; then
  limit=(-runs="${budget#runs=}")
else
  limit=(-max_total_time="$budget")
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_one() {
  local t=$1
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  local log="$build/$t.log"
  if "$build/$t" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$t/" "$build/corpus/$t" "$here/corpus/$t" >"$log" 2>&1; then
    echo "$t: ok, $(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}') executions," \
         "corpus $(ls "$build/corpus/$t" | wc -l) inputs"
  else
    echo "$t: FAILED (log: $log)"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20
    return 1
  fi
}
# Two at a time (the machines have 2 cores).
fail=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" & pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || fail=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
exit $fail
