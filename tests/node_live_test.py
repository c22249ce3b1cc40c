#!/usr/bin/python3
"""Starts a ZooKeeper and three turnstiled replicas (harness.py's) and runs
against them tests/node_live_test.js, the Node.js client's API beyond the
conformance scenarios (metadata, list, release and revoke by lease id,
revoke_holders, KeepAlive, lock-delay, AbortSignal, semaphores, shared
holds, error codes, a multi-address target with a dead address), then
tests/node_election_live_test.js (issue 23: Election, Observe, Proclaim,
acquireAll; replica 2 runs with --max-wait-timeout 1s; its last check
stops replica 0).

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
        with harness.live_replicas(os.path.abspath(args.build), "node-live", count=3,
                                   extra={2: ["--max-wait-timeout", "1s"]}) as (replicas, multi):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
            node = shutil.which("node") or "/usr/bin/node"
            # The dead address of `multi`, then replica 1 (not the capped one).
            dead_then_live = "%s,%s" % (multi.split(",")[0], replicas[1].address)
            out = subprocess.run([node, os.path.join(HERE, "node_live_test.js"),
                                  replicas[0].address, replicas[1].address, dead_then_live],
                                 env=env, timeout=120)
            election = subprocess.run([node, os.path.join(HERE, "node_election_live_test.js"),
                                       replicas[0].address, replicas[1].address,
                                       replicas[2].address, str(replicas[0].proc.pid)],
                                      env=env, timeout=120)
            return out.returncode or election.returncode
    except harness.Failure as f:
        print("FAIL node_live: %s" % f)
        return 1


if __name__ == "__main__":
    sys.exit(main())
