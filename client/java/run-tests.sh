#!/bin/sh
# Runs the Java client's unit tests (no server needed) with JUnit 5's
# console launcher: client/java/run-tests.sh OUTDIR (as built by build.sh).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run-tests.sh OUTDIR}
CP=$("$HERE/classpath.sh")
exec env -u TURNSTILE_LIVE_A -u TURNSTILE_LIVE_B -u TURNSTILE_LIVE_CAPPED java -jar /usr/share/java/junit-platform-console-standalone.jar \
  --class-path "$OUT/test-classes:$OUT/classes:$CP" --scan-class-path "$OUT/test-classes" \
  --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests
