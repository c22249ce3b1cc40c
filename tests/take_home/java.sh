#!/usr/bin/env bash
# The Java take-home consumer (tests/take_home): a program outside the
# repository compiled and run the way client/java/README.md tells a user
# to, with the client's jar and the Debian jars the README lists.
#   java.sh setup WORK          WORK/lib/ gets turnstile-client-VERSION.jar
#                               (client/java/build.sh's, from the build dir);
#                               WORK/debian-jars.txt the README's class path
#   java.sh run WORK SOURCE     javac SOURCE, then java its class
set -euo pipefail
mode=${1:?usage: java.sh setup WORK | java.sh run WORK SOURCE}
work=${2:?usage: java.sh setup WORK | java.sh run WORK SOURCE}
: "${TURNSTILE_SRC:?}" "${TURNSTILE_BUILD:?}"
mkdir -p "$work"
work=$(cd "$work" && pwd)
case "$mode" in
  setup)
    jars=("$TURNSTILE_BUILD"/java/turnstile-client-*.jar)
    jar=
    for j in "${jars[@]}"; do
      case "$j" in *-sources.jar) ;; *) [ -f "$j" ] && jar=$j ;; esac
    done
    [ -n "$jar" ] || { echo "java.sh: no turnstile-client jar in $TURNSTILE_BUILD/java (client/java/build.sh)" >&2; exit 1; }
    mkdir -p "$work/lib"
    cp "$jar" "$work/lib/"
    # The class path of Debian's jars exactly as the README gives it (the
    # block after its <!-- debian-classpath --> line), checked against the
    # list the build itself uses, so that the two cannot drift apart.
    block=$(awk '/^<!-- debian-classpath -->$/ {m = 1; next}
                 m == 1 && /^```/ {m = 2; next}
                 m == 2 && /^```/ {exit}
                 m == 2 {print}' "$TURNSTILE_SRC/client/java/README.md")
    [ -n "$block" ] || { echo "java.sh: no debian-classpath block in client/java/README.md" >&2; exit 1; }
    documented=$(bash -euc "$block"$'\n''printf %s "$DEBIAN_JARS"')
    built=$("$TURNSTILE_SRC/client/java/classpath.sh")
    if [ "$(tr : '\n' <<<"$documented" | sort)" != "$(tr : '\n' <<<"$built" | sort)" ]; then
      echo "java.sh: client/java/README.md's DEBIAN_JARS differs from client/java/classpath.sh:" >&2
      diff <(tr : '\n' <<<"$documented" | sort) <(tr : '\n' <<<"$built" | sort) >&2 || true
      exit 1
    fi
    for j in $(tr : ' ' <<<"$documented"); do
      [ -f "$j" ] || { echo "java.sh: $j is missing (a Debian package?)" >&2; exit 1; }
    done
    printf '%s\n' "$documented" > "$work/debian-jars.txt"
    ;;
  run)
    source=${3:?usage: java.sh run WORK SOURCE}
    jar=$(ls "$work"/lib/turnstile-client-*.jar)
    cp_="$jar:$(cat "$work/debian-jars.txt")"
    dir=$(mktemp -d "$work/run.XXXXXX")
    cls=$(basename "$source" .java)
    cp "$source" "$dir/$cls.java"
    pkg=$(sed -n 's/^[[:space:]]*package[[:space:]]\{1,\}\([A-Za-z0-9_.]*\)[[:space:]]*;.*/\1/p' "$source" | head -n 1)
    cd "$dir"
    javac -encoding UTF-8 -cp "$cp_" -d classes "$cls.java"
    exec java -cp "classes:$cp_" "${pkg:+$pkg.}$cls"
    ;;
  *) echo "java.sh: unknown mode $mode" >&2; exit 2 ;;
esac
