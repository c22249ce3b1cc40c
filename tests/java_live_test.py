#!/usr/bin/python3
"""Starts a ZooKeeper and three turnstiled replicas (harness.py's; the third
with --max-wait-timeout 2s) and runs the Java client's live tests
(client/java/src/test/java/io/turnstile/client/LiveElectionTest.java, built
by client/java/build.sh into BUILD/java) against them: election (campaign,
observe, proclaim and its refusals, resign hand-over in order, campaign
through a replica that caps waits) and acquireAll (overlapping sets never
deadlock; a failed or broken set leaves nothing held).

    java_live_test.py --build BUILD_DIR [--java-out DIR]
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--java-out", help="the build.sh OUTDIR (default BUILD/java)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    out = os.path.abspath(args.java_out or os.path.join(build, "java"))
    cp = subprocess.run([os.path.join(TOP, "client", "java", "classpath.sh")],
                        stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    try:
        with harness.live_replicas(build, "java-live",
                                   more=[["--max-wait-timeout", "2s"]]) as (replicas, _multi):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
            env["TURNSTILE_LIVE_A"] = replicas[0].address
            env["TURNSTILE_LIVE_B"] = replicas[1].address
            env["TURNSTILE_LIVE_CAPPED"] = replicas[2].address
            r = subprocess.run(
                ["java", "-jar", "/usr/share/java/junit-platform-console-standalone.jar",
                 "--class-path", "%s/test-classes:%s/classes:%s" % (out, out, cp),
                 "--select-class", "io.turnstile.client.LiveElectionTest",
                 "--disable-banner", "--disable-ansi-colors", "--details=tree",
                 "--fail-if-no-tests"],
                env=env, timeout=240)
            return r.returncode
    except harness.Failure as f:
        print("FAIL java_live: %s" % f)
        return 1


if __name__ == "__main__":
    sys.exit(main())
