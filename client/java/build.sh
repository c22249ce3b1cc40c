#!/bin/sh
# Builds the Java client library, its jars, its conformance runner and its
# unit tests:
#   client/java/build.sh OUTDIR
# OUTDIR/turnstile-client-VERSION.jar          the library: io.turnstile.client,
#                      the generated turnstile.v1 stubs and the ALPN helper
#                      io.netty.handler.ssl.TurnstileJdkAlpn (what a user's
#                      project puts on its class path; see README.md)
# OUTDIR/turnstile-client-VERSION-sources.jar  its sources (for IDEs)
# OUTDIR/classes       the library plus io.turnstile.example.Example and
#                      io.turnstile.conformance.Runner (the conformance
#                      harness runs these; they are not in the jars)
# OUTDIR/test-classes  the JUnit 5 tests (run them with run-tests.sh)
# OUTDIR/classpath.txt the Debian jars the library needs (classpath.sh)
# VERSION is pom.xml's <version>, the one place it is set.
# Needs Debian's libgrpc-java, protobuf-compiler-grpc-java-plugin,
# libprotobuf-java, junit5 (see deploy/debian-packages.txt) and a JDK (17).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: build.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# The project's own <version>: the first one after <artifactId>turnstile-client.
VERSION=$(sed -n '/<artifactId>turnstile-client<\/artifactId>/,/<version>/s:.*<version>\(.*\)</version>.*:\1:p' \
  "$HERE/pom.xml" | head -n 1)
[ -n "$VERSION" ] || { echo "build.sh: no <version> in $HERE/pom.xml" >&2; exit 1; }
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

# The jars: the library, without the example and the conformance runner.
JAR=turnstile-client-$VERSION
T="$OUT/jar.tmp"
rm -rf "$T"
mkdir -p "$T/classes/META-INF" "$T/sources/META-INF"
(cd "$OUT/classes" && tar --exclude=./io/turnstile/example --exclude=./io/turnstile/conformance -cf - .) |
  (cd "$T/classes" && tar -xf -)
(cd "$OUT/gen" && tar -cf - .) | (cd "$T/sources" && tar -xf -)
(cd "$HERE/src/main/java" && tar --exclude=./io/turnstile/example --exclude=./io/turnstile/conformance -cf - .) |
  (cd "$T/sources" && tar -xf -)
cp "$TOP/LICENSE" "$T/classes/META-INF/LICENSE"
cp "$TOP/LICENSE" "$T/sources/META-INF/LICENSE"
{
  echo "Implementation-Title: turnstile-client"
  echo "Implementation-Version: $VERSION"
  echo "Implementation-Vendor-Id: io.turnstile"
  echo "Bundle-License: Apache-2.0"
} > "$T/MANIFEST.MF"
# Every entry dated at the last commit: the same sources give the same jar.
DATE=$(git -C "$TOP" log -1 --format=%cI 2>/dev/null || true)
jar --create --file "$T/$JAR.jar" --manifest "$T/MANIFEST.MF" ${DATE:+--date "$DATE"} -C "$T/classes" .
jar --create --file "$T/$JAR-sources.jar" --manifest "$T/MANIFEST.MF" ${DATE:+--date "$DATE"} -C "$T/sources" .
rm -f "$OUT"/turnstile-client-*.jar
mv "$T/$JAR.jar" "$T/$JAR-sources.jar" "$OUT/"
rm -rf "$T"
