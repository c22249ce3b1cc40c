# turnstile-bench end to end (a --quick run against an in-process replica).
if(TARGET turnstile-bench)
  turnstile_test(bench_test turnstile_test_support)
  add_dependencies(bench_test turnstile-bench turnstile-bare-server)
  target_compile_definitions(bench_test PRIVATE
    TURNSTILE_BENCH_PATH="$<TARGET_FILE:turnstile-bench>"
    TURNSTILE_BARE_SERVER_PATH="$<TARGET_FILE:turnstile-bare-server>")
  set_tests_properties(bench_test PROPERTIES TIMEOUT 300)
endif()
