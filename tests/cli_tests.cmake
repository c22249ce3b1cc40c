turnstile_test(cli_test turnstile_test_support)
add_dependencies(cli_test turnstile turnstile-bench)
target_compile_definitions(cli_test PRIVATE CLI_PATH="$<TARGET_FILE:turnstile>")
