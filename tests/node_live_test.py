#!/usr/bin/python3
"""Starts a ZooKeeper and two turnstiled replicas (harness.py's) and runs
tests/node_live_test.js against them: the Node.js client's API beyond the
conformance scenarios (metadata, list, release and revoke by lease id,
revoke_holders, KeepAlive, lock-delay, AbortSignal, semaphores, shared
holds, error codes, a multi-address target with a dead address).

    node_live_test.py --build BUILD_DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    try:
        with harness.live_replicas(os.path.abspath(args.build), "node-live") as (replicas, multi):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
            out = subprocess.run([shutil.which("node") or "/usr/bin/node",
                                  os.path.join(HERE, "node_live_test.js"),
                                  replicas[0].address, replicas[1].address, multi],
                                 env=env, timeout=240)
            return out.returncode
    except harness.Failure as f:
        print("FAIL node_live: %s" % f)
        return 1


if __name__ == "__main__":
    sys.exit(main())
