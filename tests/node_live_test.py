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
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="turnstile-node-live-")
    zk, replicas = None, []
    try:
        zk = harness.ZooKeeper(tmp)
        root = "/node-live-%d" % os.getpid()
        for i in range(2):
            replicas.append(harness.Replica(os.path.abspath(args.build), zk, root, i))
        dead = "127.0.0.1:%d" % harness.free_port()  # nothing listens there
        multi = "ipv4:%s,%s" % (dead, replicas[1].address)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
        out = subprocess.run([shutil.which("node") or "/usr/bin/node",
                              os.path.join(HERE, "node_live_test.js"),
                              replicas[0].address, replicas[1].address, multi],
                             env=env, timeout=240)
        return out.returncode
    except harness.Failure as f:
        print("FAIL node_live: %s" % f)
        return 1
    finally:
        for r in replicas:
            r.stop()
        if zk is not None:
            zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
