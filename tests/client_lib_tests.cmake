# Tests of the C++ client library (client/lib) against in-process replicas on
# the shared ZooKeeper fixture server.
turnstile_test(client_lib_test turnstile_test_support turnstile::client)
add_dependencies(client_lib_test turnstiled client_threads_child)

# The library's own logic with no server: the careful-client watchdog with
# an injected clock, the retry backoff, option checks (client/lib/careful.h).
turnstile_test(client_unit_test turnstile::client)
target_include_directories(client_unit_test PRIVATE ${PROJECT_SOURCE_DIR})
