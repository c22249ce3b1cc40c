#!/bin/sh
# Runs the Java client's unit tests (no server needed) with JUnit 5's
# console launcher: client/java/run-tests.sh OUTDIR (as built by build.sh).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run-tests.sh OUTDIR}
CP=$("$HERE/classpath.sh")
exec java -jar /usr/share/java/junit-platform-console-standalone.jar \
  --class-path "$OUT/test-classes:$OUT/classes:$CP" --scan-class-path "$OUT/test-classes" \
  --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests
