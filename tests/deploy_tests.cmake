# Static checks of the deployment files (Dockerfile, docker-compose.yml,
# deploy/k8s): no Docker engine or cluster needed. The work dir keeps the npm
# install of kubernetes-models between runs.
add_test(NAME check_deploy
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_deploy.sh
                 $<TARGET_FILE:turnstiled> $<TARGET_FILE:turnstile>
                 ${CMAKE_BINARY_DIR}/deploy-check
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(check_deploy PROPERTIES TIMEOUT 600)
