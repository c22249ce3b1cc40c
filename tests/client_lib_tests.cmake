# Tests of the C++ client library (client/lib) against in-process replicas on
# the shared ZooKeeper fixture server.
turnstile_test(client_lib_test turnstile_test_support turnstile::client)
add_dependencies(client_lib_test turnstiled client_threads_child)
