# Python client interop tests: Python contenders
# (client/python/examples/contend.py, run with Debian's /usr/bin/python3 on
# the package `turnstile` the target turnstile_python_package assembles in
# ${CMAKE_BINARY_DIR}/python) against in-process C++ replicas, next to C++
# contenders.
turnstile_test(python_interop_test turnstile_test_support)
add_dependencies(python_interop_test turnstile_python_package)
target_compile_definitions(python_interop_test PRIVATE
  PY_PACKAGE_DIR="${CMAKE_BINARY_DIR}/python"
  PY_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/client/python/examples"
  PYTHON3_PATH="/usr/bin/python3")
add_dependencies(python_interop_test turnstiled)

# The Python client's own logic with no server (issue 22 must-show 3): the
# watchdog against an injected clock, the retry backoff, option checks; and
# (issue 23) the multi-lock's order, deadline and release-on-failure, the
# campaign's re-queue loop, on_leadership, Observe's re-observing iterator
# against a fake stub (these build messages with the generated stubs); and
# the asyncio client against a fake grpc.aio stub (a cancelled wait cancels
# its stream, the watchdog as a loop timer, coroutine callbacks).
add_test(NAME python_client_unit_test
         COMMAND /usr/bin/python3 -m unittest discover -s ${PROJECT_SOURCE_DIR}/client/python/tests -v)
set_tests_properties(python_client_unit_test PROPERTIES TIMEOUT 120
                     ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python")

# The election helpers (Observe, Proclaim, campaign/resign) and acquire_all
# against real replicas (tests/python_election_live_test.py starts them
# through tests/conformance/harness.py).
add_test(NAME python_election_live_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python_election_live_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(python_election_live_test PROPERTIES TIMEOUT 300 LABELS python)

# check_token (the fencing-token check) against real replicas.
add_test(NAME python_check_token_live_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python_check_token_live_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(python_check_token_live_test PROPERTIES TIMEOUT 120 LABELS python)

# The asyncio client (turnstile.aio) against a real replica: a cancelled
# wait leaves no node (ZooKeeper's own listing, within the session
# timeout), and 1,000 waiters in one process cost no thread and are granted
# in the order they queued.
add_test(NAME python_aio_live_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python_aio_live_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(python_aio_live_test PROPERTIES TIMEOUT 300 LABELS python)
