#!/bin/sh
# Builds the Java client library, its conformance runner and its unit tests:
#   client/java/build.sh OUTDIR
# OUTDIR/classes       the library (io.turnstile.client), the generated
#                      turnstile.v1 stubs and io.turnstile.conformance.Runner
# OUTDIR/test-classes  the JUnit 5 tests (run them with run-tests.sh)
# Needs Debian's libgrpc-java, protobuf-compiler-grpc-java-plugin,
# libprotobuf-java, junit5 (see deploy/debian-packages.txt) and a JDK (17).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: build.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CP=$("$HERE/classpath.sh")
rm -rf "$OUT/gen" "$OUT/classes.tmp" "$OUT/test-classes.tmp"
mkdir -p "$OUT/gen" "$OUT/classes.tmp" "$OUT/test-classes.tmp"
protoc --java_out="$OUT/gen" --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin \
  --grpc-java_out="$OUT/gen" -I "$TOP/protos" "$TOP/protos/turnstile/v1/lock.proto"
# javax.annotation.Generated is not part of Java 11+; the plugin of 1.41 still
# writes it (next to io.grpc.stub.annotations.GrpcGenerated, which stays).
sed -i '/^@javax.annotation.Generated(/,/)$/d' "$OUT/gen/turnstile/v1/LockServiceGrpc.java"
find "$OUT/gen" "$HERE/src/main/java" -name '*.java' > "$OUT/sources.txt"
javac -nowarn -encoding UTF-8 --release 17 -cp "$CP" -d "$OUT/classes.tmp" @"$OUT/sources.txt"
cp -r "$HERE/src/main/resources/." "$OUT/classes.tmp/" 2>/dev/null || true
JUNIT=/usr/share/java/junit-jupiter-api.jar:/usr/share/java/apiguardian-api.jar:/usr/share/java/opentest4j.jar:/usr/share/java/junit-platform-commons.jar
find "$HERE/src/test/java" -name '*.java' > "$OUT/test-sources.txt"
javac -nowarn -encoding UTF-8 --release 17 -cp "$OUT/classes.tmp:$CP:$JUNIT" \
  -d "$OUT/test-classes.tmp" @"$OUT/test-sources.txt"
rm -rf "$OUT/classes" "$OUT/test-classes"
mv "$OUT/classes.tmp" "$OUT/classes"
mv "$OUT/test-classes.tmp" "$OUT/test-classes"
echo "$CP" > "$OUT/classpath.txt"
