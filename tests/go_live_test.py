#!/usr/bin/python3
"""Starts a ZooKeeper and two turnstiled replicas (harness.py's) and runs
the Go client's live tests (client/go/live_test.go, `build.sh BUILD/go
live`) against them: the API beyond the conformance scenarios (metadata,
list, release and revoke by lease id, revoke_holders, KeepAlive,
lock-delay, a cancelled wait, semaphores, shared holds, error codes, a
multi-address target with a dead address).

    go_live_test.py --build BUILD_DIR
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

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
    tmp = tempfile.mkdtemp(prefix="turnstile-go-live-")
    zk, replicas = None, []
    try:
        zk = harness.ZooKeeper(tmp)
        root = "/go-live-%d" % os.getpid()
        for i in range(2):
            replicas.append(harness.Replica(build, zk, root, i))
        dead = "127.0.0.1:%d" % harness.free_port()  # nothing listens there
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
        env["TURNSTILE_LIVE_A"] = replicas[0].address
        env["TURNSTILE_LIVE_B"] = replicas[1].address
        env["TURNSTILE_LIVE_MULTI"] = "ipv4:%s,%s" % (dead, replicas[1].address)
        out = subprocess.run(["bash", os.path.join(TOP, "client", "go", "build.sh"),
                              args.go_out or os.path.join(build, "go"), "live"],
                             env=env, timeout=240)
        return out.returncode
    except harness.Failure as f:
        print("FAIL go_live: %s" % f)
        return 1
    finally:
        for r in replicas:
            r.stop()
        if zk is not None:
            zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
