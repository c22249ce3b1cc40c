# Turnstile as a user takes it home (tests/take_home/take_home.py): installed
# with `cmake --install` into a temp prefix, used from directories outside the
# repository against a live ZooKeeper and turnstiled from that prefix.
#
# take_home_setup installs and runs every tests/take_home/LANG.sh setup once
# (a fixture shared by the next two; its state is BUILD/take_home/state.json,
# per-language caches BUILD/take_home_cache/LANG, logs BUILD/take_home/logs);
# take_home_test builds and runs each language's consumer program (C++ by
# find_package and by pkg-config, Python, Node.js CommonJS and ESM, Java, Go)
# and checks its fencing token; docs_test runs every block of the Markdown
# documents marked <!-- runnable -->; take_home_cleanup removes the setup.
# docs_lint: README.md length and contents, no issue numbers in documents,
# the CLI's exit codes and the installed files in the documents' tables, no
# command in a code block that starts with a bare sudo.
# take_home_harness_selftest: the docs test fails on a broken block, naming it.
set(take_home_py ${CMAKE_CURRENT_SOURCE_DIR}/take_home/take_home.py)

add_test(NAME take_home_setup
         COMMAND /usr/bin/python3 ${take_home_py} --build ${CMAKE_BINARY_DIR} setup)
set_tests_properties(take_home_setup PROPERTIES TIMEOUT 1800 LABELS take_home
                     FIXTURES_SETUP take_home RESOURCE_LOCK take_home)
add_test(NAME take_home_test
         COMMAND /usr/bin/python3 ${take_home_py} --build ${CMAKE_BINARY_DIR} consumers --use-setup)
set_tests_properties(take_home_test PROPERTIES TIMEOUT 900 LABELS take_home
                     FIXTURES_REQUIRED take_home RESOURCE_LOCK take_home)
add_test(NAME docs_test
         COMMAND /usr/bin/python3 ${take_home_py} --build ${CMAKE_BINARY_DIR} docs --use-setup)
set_tests_properties(docs_test PROPERTIES TIMEOUT 1200 LABELS "take_home;docs"
                     FIXTURES_REQUIRED take_home RESOURCE_LOCK take_home)
add_test(NAME take_home_cleanup
         COMMAND /usr/bin/python3 ${take_home_py} --build ${CMAKE_BINARY_DIR} cleanup)
set_tests_properties(take_home_cleanup PROPERTIES TIMEOUT 60 LABELS take_home
                     FIXTURES_CLEANUP take_home RESOURCE_LOCK take_home)

add_test(NAME docs_lint COMMAND /usr/bin/python3 ${take_home_py} lint --root ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_lint PROPERTIES TIMEOUT 60 LABELS docs)
add_test(NAME take_home_harness_selftest
         COMMAND /usr/bin/python3 ${take_home_py} --build ${CMAKE_BINARY_DIR} selftest)
set_tests_properties(take_home_harness_selftest PROPERTIES TIMEOUT 180 LABELS docs
                     PASS_REGULAR_EXPRESSION "selftest: PASS")
