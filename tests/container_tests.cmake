# The container image run for real (issue 24): tests/container_test.py builds
# deploy/docker/Dockerfile with podman (base images from debootstrap: no
# registry), runs two replicas and docker-compose.yml's turnstile services from
# it against a ZooKeeper it starts, and stops them. Needs root; exit 77 (skip)
# only where containers cannot run at all. `ctest -L container` runs it alone.
add_test(NAME container_test
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/container_test.py
                 --build ${CMAKE_BINARY_DIR})
set_tests_properties(container_test PROPERTIES TIMEOUT 1500 LABELS container
                     SKIP_RETURN_CODE 77)
