#!/usr/bin/python3
"""Contender for the Python/C++ interop test (tests/python_interop_test.cc).

Contend mode (default): N rounds of: acquire --lock through --server (waiting
up to --wait s), append "ENTER <id> <token> <monotonic_ns>" to --log, hold
~1-5 ms, append "EXIT <id> <token> <monotonic_ns>", release. Each line is
one write() to a file opened with O_APPEND, so writers in other processes
never interleave within a line. Times are time.monotonic_ns()
(CLOCK_MONOTONIC, the clock of C++ std::chrono::steady_clock on Linux).
Prints "READY" once connected, "DONE <id> <rounds>" at the end; exit 0.

Probe mode (--probe): one acquire with --wait (0 = try once); prints
"ACQUIRED <token>" (then releases) or "CODE <grpc status code name>".
Exit 0 either way.

Any unexpected failure: message on stderr, exit 1.

    PYTHONPATH=build/python /usr/bin/python3 client/python/examples/contend.py \
        --server 127.0.0.1:7400 --lock L --rounds 25 --log /tmp/cs.log --id py1
"""
import argparse
import os
import random
import sys
import time

from turnstile import Client, TurnstileError


def append(fd: int, kind: str, ident: str, token: int, ns: int) -> None:
    line = ("%s %s %d %d\n" % (kind, ident, token, ns)).encode()
    if os.write(fd, line) != len(line):
        raise OSError("short write to the log")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--lock", required=True)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--log")
    p.add_argument("--id", default="py%d" % os.getpid())
    p.add_argument("--wait", type=float, default=60.0, help="wait timeout per acquire, s")
    p.add_argument("--probe", action="store_true", help="one acquire; print its outcome")
    args = p.parse_args()

    with Client(args.server) as client:
        if args.probe:
            try:
                lock = client.acquire(args.lock, wait_timeout=args.wait, owner=args.id)
            except TurnstileError as e:
                print("CODE %s" % e.code.name, flush=True)
                return 0
            print("ACQUIRED %d" % lock.fencing_token, flush=True)
            lock.release()
            return 0

        if not args.log:
            p.error("--log is required unless --probe")
        fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            print("READY", flush=True)
            for i in range(args.rounds):
                try:
                    lock = client.acquire(args.lock, wait_timeout=args.wait, owner=args.id)
                except TurnstileError as e:
                    print("%s: round %d: acquire failed: %s" % (args.id, i, e), file=sys.stderr)
                    return 1
                token = lock.fencing_token
                append(fd, "ENTER", args.id, token, time.monotonic_ns())
                time.sleep(random.uniform(0.001, 0.005))  # the critical section
                state = lock.state
                append(fd, "EXIT", args.id, token, time.monotonic_ns())
                if not lock.release() or state != "held":
                    print("%s: round %d: hold not intact (state %s, %s)"
                          % (args.id, i, state, lock.lost_reason), file=sys.stderr)
                    return 1
        finally:
            os.close(fd)
        print("DONE %s %d" % (args.id, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
