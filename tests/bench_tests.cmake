# turnstile-bench end to end (a --quick run against an in-process replica).
if(TARGET turnstile-bench)
  turnstile_test(bench_test turnstile_test_support)
  add_dependencies(bench_test turnstile-bench turnstile-bare-server)
  target_compile_definitions(bench_test PRIVATE
    TURNSTILE_BENCH_PATH="$<TARGET_FILE:turnstile-bench>"
    TURNSTILE_BARE_SERVER_PATH="$<TARGET_FILE:turnstile-bare-server>")
  set_tests_properties(bench_test PROPERTIES TIMEOUT 300)
  # deploy/local/bench.sh --security (issue 24): its PKI, policies and
  # secure replicas, W1 quick over all of them. Needs the CLI (health checks)
  # and turnstiled in this build.
  add_dependencies(bench_test turnstile turnstiled)
  add_test(NAME bench_script_security_test
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_script_test.sh ${PROJECT_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_script_security_test PROPERTIES TIMEOUT 300)
endif()
