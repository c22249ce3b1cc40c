#!/usr/bin/python3
"""The conformance runner for the Python client library (issue 22).

Reads commands (JSON lines) on stdin, drives the package turnstile (client/python)
and writes events (JSON lines) on stdout; the protocol is in
tests/conformance/README.md. Each acquire runs on a thread of its own (the
library's acquire blocks until the lock is held or the wait ends); a second
thread per hold reports its state changes.
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


class Runner:
    def __init__(self, target, owner):
        self.client = Client(target)
        self.owner = owner
        self.locks = {}
        self.mu = threading.Lock()

    def acquire(self, cmd):
        hold = cmd["hold"]

        def on_queued(position):
            say({"hold": hold, "event": "queued", "position": position})

        def on_revoke(requester, reason):
            say({"hold": hold, "event": "revoke_requested", "requester": requester,
                 "reason": reason})

        try:
            lock = self.client.acquire(
                cmd["lock"], wait_timeout=cmd.get("wait_ms", 10000) / 1000.0,
                ttl=cmd.get("ttl_ms", 0) / 1000.0, owner=cmd.get("owner", ""),
                metadata=cmd.get("metadata"), shared=cmd.get("kind") == "shared",
                on_revoke=on_revoke, revoke_holders=cmd.get("revoke_holders", False),
                revoke_reason=cmd.get("revoke_reason", ""),
                lock_delay=cmd.get("lock_delay_ms", 0) / 1000.0,
                max_holders=cmd.get("max_holders", 0) if cmd.get("kind") == "semaphore" else 0,
                on_queued=on_queued)
        except TurnstileError as e:
            say({"hold": hold, "event": "error", "code": code_name(e.code), "message": str(e)})
            return
        with self.mu:
            self.locks[hold] = lock
        say({"hold": hold, "event": "acquired", "token": lock.fencing_token,
             "lease_id": lock.lease_id})
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
            if now == "suspended":
                say({"hold": hold, "event": "suspended"})
            elif now == "held":
                say({"hold": hold, "event": "resumed"})
            elif now == "lost":
                say({"hold": hold, "event": "lost", "reason": lock.lost_reason,
                     "message": lock.lost_message})
            elif now == "released":
                say({"hold": hold, "event": "released"})
            last = now

    def release(self, cmd):
        with self.mu:
            lock = self.locks.get(cmd["hold"])
        if lock is None:
            say({"hold": cmd["hold"], "event": "error", "code": "NOT_HELD",
                 "message": "release of a hold this client does not have"})
            return
        lock.release()  # the follower thread reports RELEASED (or LOST)

    def unary(self, cmd):
        req = cmd["req"]
        try:
            if cmd["cmd"] == "describe":
                d = self.client.describe(cmd["lock"])
                if d is None:
                    say({"req": req, "error": "NOT_FOUND"})
                    return
                say({"req": req, "holders": [h.owner for h in d.holders],
                     "holder_identities": [h.identity for h in d.holders],
                     "waiters": [w.owner for w in d.waiters], "max_holders": d.max_holders})
            elif cmd["cmd"] == "list":
                say({"req": req, "names": list(self.client.list(cmd.get("prefix", "")))})
            elif cmd["cmd"] == "check":
                c = self.client.check_token(cmd["lock"], int(cmd["token"]),
                                            allow_stale=bool(cmd.get("stale", False)))
                say({"req": req, "verdict": c.verdict,
                     "highest_holder_token": c.highest_holder_token,
                     "linearizable": c.linearizable})
            elif cmd["cmd"] == "revoke":
                found = self.client.revoke(cmd["lease_id"], cmd.get("reason", ""),
                                           requester=self.owner)
                say({"req": req, "ok": True} if found else {"req": req, "error": "NOT_FOUND"})
        except TurnstileError as e:
            say({"req": req, "error": code_name(e.code), "message": str(e)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--owner", default="")
    args = ap.parse_args()
    runner = Runner(args.server, args.owner)
    say({"event": "ready", "lang": "python"})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        op = cmd.get("cmd")
        if op == "quit":
            break
        if op == "acquire":
            threading.Thread(target=runner.acquire, args=(cmd,), daemon=True).start()
        elif op == "release":
            threading.Thread(target=runner.release, args=(cmd,), daemon=True).start()
        elif op in ("describe", "list", "revoke", "check"):
            threading.Thread(target=runner.unary, args=(cmd,), daemon=True).start()
        else:
            say({"event": "error", "code": "UNKNOWN_COMMAND", "message": line})
    with runner.mu:
        locks = list(runner.locks.values())
    for lock in locks:
        lock.release(timeout=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
