#!/bin/sh
# Prints the runtime class path of the Java client (Debian's jars under
# /usr/share/java: grpc-java 1.41, protobuf-java 3.21, netty 4.1, guava,
# perfmark, gson, jsr305, error-prone annotations, google-common-protos).
# client/java/README.md lists the same jars for users (DEBIAN_JARS);
# tests/take_home/java.sh checks that the two lists agree.
J=${TURNSTILE_JAVA_JARS:-/usr/share/java}
cp=""
for jar in grpc-api grpc-core grpc-context grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub \
           protobuf guava perfmark-api gson jsr305 error-prone-annotations proto-google-common-protos \
           netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common \
           netty-handler netty-handler-proxy netty-resolver netty-transport \
           netty-transport-native-unix-common; do
  cp="$cp${cp:+:}$J/$jar.jar"
done
echo "$cp"
