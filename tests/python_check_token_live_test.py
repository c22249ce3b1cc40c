#!/usr/bin/python3
"""The Python client's check_token against real replicas: a ZooKeeper and
two turnstiled replicas started by tests/conformance/harness.py's
live_replicas.

    python_check_token_live_test.py --build BUILD_DIR [--package DIR]

Checks: a holder's token is CURRENT from both replicas (with
highest_holder_token and linearizable); a waiter's token is WAITING; once
the holder releases, its token is SUPERSEDED everywhere and the next
holder's CURRENT; allow_stale answers with linearizable False; an empty
name and token 0 raise INVALID_ARGUMENT. Every wait has a deadline; the
file runs in a few seconds.
"""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402

WITHIN = 15.0  # seconds: the deadline of every wait


class Check(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Check(what)


def wait_until(pred, what):
    deadline = time.monotonic() + WITHIN
    while not pred():
        if time.monotonic() > deadline:
            raise Check("timed out waiting for " + what)
        time.sleep(0.02)


def run_checks(a, b):
    import turnstile
    from turnstile import CURRENT, SUPERSEDED, TOKEN_WAITING, TurnstileError

    holder = a.acquire("py-check", wait_timeout=10)
    token = holder.fencing_token
    for c in (a, b):
        r = c.check_token("py-check", token)
        expect(isinstance(r, turnstile.TokenCheck), "a TokenCheck: %r" % (r,))
        expect(r.verdict == CURRENT and r.current, "holder's token: %r" % (r,))
        expect(r.highest_holder_token == token, "highest_holder_token: %r" % (r,))
        expect(r.linearizable, "linearizable by default: %r" % (r,))
    r = b.check_token("py-check", token, allow_stale=True)
    expect(r.verdict == CURRENT and not r.linearizable, "allow_stale: %r" % (r,))
    expect(b.check_token("py-check", token - 1).verdict == SUPERSEDED, "a lower token")
    expect(b.check_token("py-check-other", token).verdict == SUPERSEDED, "another lock")

    # A waiter (its token from describe: a client only gets one with its grant).
    got = {}

    def wait():
        got["lock"] = b.acquire("py-check", wait_timeout=WITHIN)

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    wait_until(lambda: (a.describe("py-check") is not None
                        and len(a.describe("py-check").waiters) == 1), "the waiter")
    waiter_token = a.describe("py-check").waiters[0].fencing_token
    r = a.check_token("py-check", waiter_token)
    expect(r.verdict == TOKEN_WAITING and not r.current, "waiter's token: %r" % (r,))
    expect(r.highest_holder_token == token, "highest while waiting: %r" % (r,))

    expect(holder.release(), "release")
    t.join(WITHIN)
    expect("lock" in got, "the waiter was granted")
    expect(got["lock"].fencing_token == waiter_token, "the waiter's token is its node's")
    for c in (a, b):
        r = c.check_token("py-check", token)
        expect(r.verdict == SUPERSEDED and not r.current, "released token: %r" % (r,))
        expect(r.highest_holder_token == waiter_token, "highest after handoff: %r" % (r,))
        expect(c.check_token("py-check", waiter_token).current, "the new holder's token")
    got["lock"].release()

    for name, tok, what in (("", 5, "empty name"), ("py-check", 0, "token 0")):
        try:
            a.check_token(name, tok)
            raise Check(what + " was accepted")
        except TurnstileError as e:
            expect(e.code.name == "INVALID_ARGUMENT", "%s: %s" % (what, e.code.name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--package", help="the import root of the package turnstile "
                    "(default BUILD/python, where the CMake build assembles it)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.abspath(args.package or os.path.join(build, "python")))
    from turnstile import Client
    started = time.monotonic()
    try:
        with harness.live_replicas(build, "py-check", count=2) as (replicas, _):
            a, b = Client(replicas[0].address), Client(replicas[1].address)
            try:
                run_checks(a, b)
            finally:
                a.close()
                b.close()
    except (Check, harness.Failure) as e:
        print("FAIL python_check_token_live: %s" % e)
        return 1
    print("PASS python_check_token_live (%.1fs)" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
