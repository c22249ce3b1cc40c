# The cross-language conformance suite (issue 22): every scenario of
# tests/conformance/scenarios.json for every client language, each its own
# ctest entry (label conformance), run by tests/conformance/harness.py
# against a ZooKeeper and turnstiled processes it starts. The languages
# built so far: C++ (the runner below), Python (threaded: runner.py; asyncio,
# turnstile.aio: runner_aio.py, the language python_aio), Node.js
# (runner_node.js; client/node's npm packages come from
# deploy/local/install-node-deps.sh, run by tests/run.sh), Java
# (client/java, built by the target below) and Go (client/go, built by
# the target turnstile_go below); "mixed" runs the contention scenario with
# clients of every language at once.
add_executable(conformance_runner_cpp conformance/runner_cpp.cc)
target_link_libraries(conformance_runner_cpp PRIVATE turnstile::client turnstile::proto
                      absl::strings)
target_include_directories(conformance_runner_cpp PRIVATE ${PROJECT_SOURCE_DIR})

# The Go client library (client/go) and its runner: client/go/build.sh
# builds offline in GOPATH mode, with the committed stubs (no protoc), against
# Debian's Go packages (deploy/debian-packages.txt) into ${CMAKE_BINARY_DIR}/go
# (bin/conformance-runner; the harness finds it there, or at
# $TURNSTILE_GO_RUNNER).
file(GLOB_RECURSE turnstile_go_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/client/go/*.go)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/go/build.stamp
                   COMMAND bash ${PROJECT_SOURCE_DIR}/client/go/build.sh ${CMAKE_BINARY_DIR}/go
                   DEPENDS ${turnstile_go_sources} ${PROJECT_SOURCE_DIR}/client/go/build.sh
                           ${PROJECT_SOURCE_DIR}/client/go/install-gopath.sh
                   COMMENT "Go client library and conformance runner (client/go/build.sh)"
                   VERBATIM)
add_custom_target(turnstile_go ALL DEPENDS ${CMAKE_BINARY_DIR}/go/build.stamp)

add_custom_target(conformance_deps ALL DEPENDS conformance_runner_cpp turnstiled
                  turnstile_python_package turnstile_go)

# The Go library's unit tests (watchdog timing with an injected clock,
# option validation, retry backoff, an in-process fake LockService, mutual
# TLS from the TURNSTILE_TLS_* variables): `go test`, offline, no replica.
add_test(NAME go_client_unit_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/client/go/build.sh ${CMAKE_BINARY_DIR}/go test)
set_tests_properties(go_client_unit_test PROPERTIES TIMEOUT 300 LABELS go)
# The committed stubs (client/go/turnstilepb) are what lock.proto generates:
# regenerated into a temporary directory with the generators they were made
# with, or skipped, saying why, where those are not installed (another
# protoc-gen-go, such as the 1.3 one golang-etcd-server-dev brings).
add_test(NAME go_client_stubs_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/client/go/regenerate-stubs.sh --check)
set_tests_properties(go_client_stubs_test PROPERTIES TIMEOUT 60 LABELS go SKIP_RETURN_CODE 77)
# ... and its API beyond the conformance scenarios against real replicas
# (tests/go_live_test.py starts them; client/go/live_test.go).
add_test(NAME go_client_live_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/go_live_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(go_client_live_test PROPERTIES TIMEOUT 300 LABELS go)

# The Java client (client/java): the library, its conformance runner and its
# JUnit 5 tests, compiled with javac against Debian's jars into build/java
# (the harness runs build/java/classes). Always rebuilt: javac of the whole
# library takes a few seconds.
add_custom_target(turnstile_java_client ALL
                  COMMAND ${PROJECT_SOURCE_DIR}/client/java/build.sh ${CMAKE_BINARY_DIR}/java
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  COMMENT "Building the Java client (client/java/build.sh)")
add_test(NAME java_client_unit_test
         COMMAND ${PROJECT_SOURCE_DIR}/client/java/run-tests.sh ${CMAKE_BINARY_DIR}/java)
set_tests_properties(java_client_unit_test PROPERTIES TIMEOUT 300 LABELS java)
# ... and its election helpers and acquireAll against real replicas
# (tests/java_live_test.py starts them; LiveElectionTest, skipped by the
# unit run above for want of replicas).
add_test(NAME java_client_live_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/java_live_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(java_client_live_test PROPERTIES TIMEOUT 300 LABELS java)

file(READ ${CMAKE_CURRENT_SOURCE_DIR}/conformance/scenarios.json conformance_json)
string(REGEX MATCHALL "\"name\": \"[a-z_]+\"" conformance_names "${conformance_json}")
foreach(entry ${conformance_names})
  string(REGEX REPLACE "\"name\": \"([a-z_]+)\"" "\\1" scenario "${entry}")
  foreach(lang cpp python python_aio node java go)
    add_test(NAME conformance_${lang}_${scenario}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/conformance/harness.py
                     --build ${CMAKE_BINARY_DIR} --lang ${lang} ${scenario})
    set_tests_properties(conformance_${lang}_${scenario} PROPERTIES TIMEOUT 300
                         LABELS conformance)
  endforeach()
endforeach()
add_test(NAME conformance_mixed_fenced_exclusion
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/conformance/harness.py
                 --build ${CMAKE_BINARY_DIR} --lang mixed fenced_exclusion)
set_tests_properties(conformance_mixed_fenced_exclusion PROPERTIES TIMEOUT 300
                     LABELS conformance)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/conformance/scenarios.json)

# The Node.js client's unit tests (no server: options, the watchdog with an
# injected clock, retry backoff, KeepAlive).
find_program(TURNSTILE_NODE node)
add_test(NAME node_client_unit_test COMMAND ${TURNSTILE_NODE} --test
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/client/node)
set_tests_properties(node_client_unit_test PROPERTIES TIMEOUT 120 LABELS node)
# ... and over TLS and mutual TLS (the TURNSTILE_TLS_* variables), against
# replicas with a throw-away PKI.
add_test(NAME node_client_tls_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/node_tls_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(node_client_tls_test PROPERTIES TIMEOUT 300 LABELS node)
# ... and the API beyond the conformance scenarios against real replicas.
add_test(NAME node_client_live_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/node_live_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(node_client_live_test PROPERTIES TIMEOUT 300 LABELS node)

# The harness itself: with a "library" that grants everything at once with
# falling tokens, the contention scenario must fail, naming the fenced
# register or the overlap.
add_test(NAME conformance_harness_catches_a_broken_library
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/conformance/harness.py
                 --build ${CMAKE_BINARY_DIR} --lang broken fenced_exclusion)
set_tests_properties(conformance_harness_catches_a_broken_library PROPERTIES TIMEOUT 300
                     LABELS conformance
                     PASS_REGULAR_EXPRESSION "FAIL fenced_exclusion \\[broken\\]: .*(fenced register|still held)")
