#!/usr/bin/python3
"""The conformance runner for the Python client library (issue 22).

Reads commands (JSON lines) on stdin, drives the package turnstile (client/python)
and writes events (JSON lines) on stdout; the protocol is in
tests/conformance/README.md. Each acquire runs on a thread of its own (the
library's acquire blocks until the lock is held or the wait ends); a second
thread per hold reports its state changes.

The commands' options and the events' fields are spelled by the functions
below, which runner_aio.py (the asyncio library's runner) shares.
"""
import argparse
import json
import sys
import threading

import grpc
from turnstile import Client, TurnstileError

_out = threading.Lock()


def say(obj):
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def code_name(code):
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--owner", default="")
    return ap.parse_args()


def ready(lang):
    say({"event": "ready", "lang": lang})


def acquire_options(cmd, hold):
    """The library's acquire options for an acquire command, its callbacks
    saying queued and revoke_requested."""
    def on_queued(position):
        say({"hold": hold, "event": "queued", "position": position})

    def on_revoke(requester, reason):
        say({"hold": hold, "event": "revoke_requested", "requester": requester,
             "reason": reason})

    return dict(
        wait_timeout=cmd.get("wait_ms", 10000) / 1000.0,
        ttl=cmd.get("ttl_ms", 0) / 1000.0, owner=cmd.get("owner", ""),
        metadata=cmd.get("metadata"), shared=cmd.get("kind") == "shared",
        on_revoke=on_revoke, revoke_holders=cmd.get("revoke_holders", False),
        revoke_reason=cmd.get("revoke_reason", ""),
        lock_delay=cmd.get("lock_delay_ms", 0) / 1000.0,
        max_holders=cmd.get("max_holders", 0) if cmd.get("kind") == "semaphore" else 0,
        on_queued=on_queued)


def say_error(key, value, e):
    """A TurnstileError as the reply of a request or the end of a hold."""
    if key == "hold":
        say({"hold": value, "event": "error", "code": code_name(e.code), "message": str(e)})
    else:
        say({"req": value, "error": code_name(e.code), "message": str(e)})


def say_acquired(hold, lock):
    say({"hold": hold, "event": "acquired", "token": lock.fencing_token,
         "lease_id": lock.lease_id})


def say_state(hold, lock, state):
    """A held hold's later state: suspended, resumed, lost or released."""
    if state == "suspended":
        say({"hold": hold, "event": "suspended"})
    elif state == "held":
        say({"hold": hold, "event": "resumed"})
    elif state == "lost":
        say({"hold": hold, "event": "lost", "reason": lock.lost_reason,
             "message": lock.lost_message})
    elif state == "released":
        say({"hold": hold, "event": "released"})


def say_not_held(hold):
    say({"hold": hold, "event": "error", "code": "NOT_HELD",
         "message": "release of a hold this client does not have"})


def unary_call(client, cmd, owner):
    """(the library call of a describe, list, check or revoke command as a
    function of no arguments, and how its result is said)."""
    req = cmd["req"]
    op = cmd["cmd"]
    if op == "describe":
        return (lambda: client.describe(cmd["lock"])), lambda d: say(
            {"req": req, "error": "NOT_FOUND"} if d is None else
            {"req": req, "holders": [h.owner for h in d.holders],
             "holder_identities": [h.identity for h in d.holders],
             "waiters": [w.owner for w in d.waiters], "max_holders": d.max_holders})
    if op == "list":
        return (lambda: client.list(cmd.get("prefix", ""))), lambda names: say(
            {"req": req, "names": list(names)})
    if op == "check":
        return (lambda: client.check_token(cmd["lock"], int(cmd["token"]),
                                           allow_stale=bool(cmd.get("stale", False)))), \
            lambda c: say({"req": req, "verdict": c.verdict,
                           "highest_holder_token": c.highest_holder_token,
                           "linearizable": c.linearizable})
    return (lambda: client.revoke(cmd["lease_id"], cmd.get("reason", ""), requester=owner)), \
        lambda found: say({"req": req, "ok": True} if found else
                          {"req": req, "error": "NOT_FOUND"})


UNARY = ("describe", "list", "revoke", "check")


QUIT = "quit"


def command(runner, line):
    """One line of stdin: QUIT, None (a blank line, or an unknown command:
    said), or (the runner's method for it, the command)."""
    line = line.strip()
    if not line:
        return None
    cmd = json.loads(line)
    op = cmd.get("cmd")
    if op == QUIT:
        return QUIT
    method = {"acquire": runner.acquire, "release": runner.release}.get(op)
    if method is None and op in UNARY:
        method = runner.unary
    if method is None:
        say({"event": "error", "code": "UNKNOWN_COMMAND", "message": line})
        return None
    return method, cmd


class Runner:
    def __init__(self, target, owner):
        self.client = Client(target)
        self.owner = owner
        self.locks = {}
        self.mu = threading.Lock()

    def acquire(self, cmd):
        hold = cmd["hold"]
        try:
            lock = self.client.acquire(cmd["lock"], **acquire_options(cmd, hold))
        except TurnstileError as e:
            say_error("hold", hold, e)
            return
        with self.mu:
            self.locks[hold] = lock
        say_acquired(hold, lock)
        self.follow(hold, lock)

    def follow(self, hold, lock):
        """Reports the hold's state changes until it ends."""
        states = ("held", "suspended", "lost", "released")
        last = "held"
        while last in ("held", "suspended"):
            lock.wait_for_state(*[s for s in states if s != last])
            now = lock.state
            if now == last:
                continue
            say_state(hold, lock, now)
            last = now

    def release(self, cmd):
        with self.mu:
            lock = self.locks.get(cmd["hold"])
        if lock is None:
            say_not_held(cmd["hold"])
            return
        lock.release()  # the follower thread reports RELEASED (or LOST)

    def unary(self, cmd):
        call, report = unary_call(self.client, cmd, self.owner)
        try:
            report(call())
        except TurnstileError as e:
            say_error("req", cmd["req"], e)


def main():
    args = parse_args()
    runner = Runner(args.server, args.owner)
    ready("python")
    for line in sys.stdin:
        todo = command(runner, line)
        if todo == QUIT:
            break
        if todo is not None:
            threading.Thread(target=todo[0], args=(todo[1],), daemon=True).start()
    with runner.mu:
        locks = list(runner.locks.values())
    for lock in locks:
        lock.release(timeout=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
