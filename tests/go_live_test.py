#!/usr/bin/python3
"""Starts a ZooKeeper and two turnstiled replicas (harness.py's) and runs
the Go client's live tests (client/go/live_test.go, `build.sh BUILD/go
live`) against them: the API beyond the conformance scenarios (metadata,
list, release and revoke by lease id, revoke_holders, KeepAlive,
lock-delay, a cancelled wait, semaphores, shared holds, error codes, a
multi-address target with a dead address; election: Campaign, Observe,
Proclaim, Resign, Campaign through a replica with a short
--max-wait-timeout; AcquireAll).

    go_live_test.py --build BUILD_DIR
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
    ap.add_argument("--go-out", help="the build.sh OUTDIR (default BUILD/go)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    try:
        # A third replica caps waits at 2 s (--max-wait-timeout): Campaign
        # must queue again through it, invisibly.
        with harness.live_replicas(build, "go-live",
                                   more=[["--max-wait-timeout", "2s"]]) as (replicas, multi):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
            env["TURNSTILE_LIVE_A"] = replicas[0].address
            env["TURNSTILE_LIVE_B"] = replicas[1].address
            env["TURNSTILE_LIVE_CAPPED"] = replicas[2].address
            env["TURNSTILE_LIVE_MULTI"] = multi
            out = subprocess.run(["bash", os.path.join(TOP, "client", "go", "build.sh"),
                                  args.go_out or os.path.join(build, "go"), "live"],
                                 env=env, timeout=240)
            return out.returncode
    except harness.Failure as f:
        print("FAIL go_live: %s" % f)
        return 1


if __name__ == "__main__":
    sys.exit(main())
