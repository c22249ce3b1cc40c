#!/usr/bin/python3
"""Takes a turnstile lock, prints its fencing token, holds it briefly and
releases it.

Usage, with the package installed (pip install client/python; see
client/python/README.md):

    python3 example.py --server 127.0.0.1:7400 my-lock

or from the repository root on the package the CMake build assembles:

    PYTHONPATH=build/python /usr/bin/python3 client/python/examples/example.py my-lock

Options: --wait SECONDS (0 = try once; default 30), --hold SECONDS
(default 1), --owner TEXT. Exit status 0 on success, 1 if the lock could not
be taken (the gRPC status code is printed) or was lost while held.
"""
import argparse
import os
import socket
import sys
import time

from turnstile import Client, TurnstileError


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="127.0.0.1:7400", help="replica host:port")
    p.add_argument("--wait", type=float, default=30.0, help="wait timeout, s (0 = try once)")
    p.add_argument("--hold", type=float, default=1.0, help="how long to hold, s")
    p.add_argument("--owner", default="example.py@%s/%d" % (socket.gethostname(), os.getpid()))
    p.add_argument("lock", help="lock name")
    args = p.parse_args()

    with Client(args.server) as client:
        try:
            lock = client.acquire(args.lock, wait_timeout=args.wait, owner=args.owner,
                                  metadata={"example": "python"})
        except TurnstileError as e:
            print("could not take %r: %s %s" % (args.lock, e.code.name, e.details))
            return 1
        with lock:
            print("acquired %r: fencing token %d (lease %s)"
                  % (args.lock, lock.fencing_token, lock.lease_id))
            d = client.describe(args.lock)
            if d and d.holders:
                print("holder: owner=%s replica=%s" % (d.holders[0].owner, d.holders[0].replica_id))
            # Hold briefly; stop early if the hold is lost or suspended.
            lock.wait_for_state("lost", "suspended", timeout=args.hold)
            if lock.state != "held":
                print("hold ended early: %s %s" % (lock.state, lock.lost_reason or ""))
                return 1
        print("released %r (%s)" % (args.lock, lock.state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
