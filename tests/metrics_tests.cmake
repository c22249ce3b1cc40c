turnstile_test(metrics_test turnstile_test_support)

# Debian's prometheus on loopback scraping live replicas; evaluates every
# dashboard query and rule expression (tests/check_monitoring.sh extracts them).
turnstile_test(monitoring_live_test turnstile_test_support)
target_compile_definitions(monitoring_live_test PRIVATE SOURCE_DIR="${PROJECT_SOURCE_DIR}")
