#!/usr/bin/python3
"""The Python client's election helpers and multi-lock against real
replicas (issue 23): a ZooKeeper and three turnstiled replicas started by
tests/conformance/harness.py's live_replicas; replica 1 runs with
--max-wait-timeout 1s (the campaign must re-queue past it).

    python_election_live_test.py --build BUILD_DIR [--stubs DIR] [-k SUBSTRING]

Checks: campaign + observe see the leader and its value; proclaim changes
the value observers see; a stale token and a released lease are refused
(FAILED_PRECONDITION, NOT_FOUND); resign hands leadership to the next
candidate, said before the next one leads, and observers see the terms in
order; a campaign longer than a replica's wait limit re-queues invisibly;
acquire_all of overlapping sets from several clients never deadlocks and
keeps every lock exclusive; a failed acquire_all (timeout, try-once) leaves
none of its locks held or queued; losing one lock loses the set; an
observer through a two-replica target re-observes when its replica drains.
Every wait has a deadline; the whole file runs in well under a minute.
"""
import argparse
import os
import signal
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402

WITHIN = 15.0  # seconds: the deadline of every wait for an event


class Check(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Check(what)


def code_of(fn):
    from turnstile import TurnstileError
    try:
        fn()
    except TurnstileError as e:
        return e.code.name
    return "OK"


class Watcher:
    """Reads an Observation on a thread; next_matching() waits for an item
    with a deadline."""

    def __init__(self, obs):
        self.obs = obs
        self.items = []
        self.cond = threading.Condition()
        self.error = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            for item in self.obs:
                with self.cond:
                    self.items.append(item)
                    self.cond.notify_all()
        except Exception as e:  # noqa: BLE001 - reported by the waits
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def wait_for(self, pred, what, start=0):
        """The index of the first item from `start` that satisfies pred."""
        deadline = time.monotonic() + WITHIN
        with self.cond:
            while True:
                for i in range(start, len(self.items)):
                    if pred(self.items[i]):
                        return i
                if self.error is not None:
                    raise Check("observer failed: %r" % self.error)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Check("observer never saw %s; saw %s" % (what, self.summary()))
                self.cond.wait(left)

    def summary(self):
        return [(i.kind, i.leader and (i.leader.value, i.leader.fencing_token))
                for i in self.items]

    def close(self):
        self.obs.close()


def is_leader(value, token=None):
    from turnstile import LEADER
    return lambda i: (i.kind == LEADER and i.leader.value == value
                      and (token is None or i.leader.fencing_token == token))


def wait_until(pred, what):
    deadline = time.monotonic() + WITHIN
    while not pred():
        if time.monotonic() > deadline:
            raise Check("timed out waiting for " + what)
        time.sleep(0.02)  # polling Describe: there is no event to wait on


CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


@check
def campaign_observe_proclaim_and_stale_tokens(env):
    from turnstile import NO_LEADER
    from turnstile import Election
    a, b = env["a"], env["b"]
    name = "el/basic"
    watcher = Watcher(b.observe(name))
    try:
        watcher.wait_for(lambda i: i.kind == NO_LEADER, "no leader at first")
        said = []
        el = Election(a, name, owner="alice", on_leadership=lambda ok, why: said.append((ok, why)))
        term = el.campaign("alice:1", timeout=WITHIN)
        expect(el.is_leader() and said == [(True, "ACQUIRED")], "leader, said %r" % said)
        i = watcher.wait_for(is_leader("alice:1", term.fencing_token), "alice:1")
        seen = watcher.items[i].leader
        expect(seen.owner == "alice" and seen.metadata == {"value": "alice:1"},
               "observed %r" % (seen,))
        expect(b.leader(name).fencing_token == term.fencing_token, "leader() once")
        el.proclaim("alice:2")
        watcher.wait_for(is_leader("alice:2", term.fencing_token), "the proclaimed value", i)
        d = b.describe(name)
        expect(d.holders[0].metadata["value"] == "alice:2" and
               d.holders[0].fencing_token == term.fencing_token, "describe after proclaim")
        expect(el.is_leader(), "proclaim keeps the hold")
        # A token that is not this lease's: FAILED_PRECONDITION, nothing changes.
        expect(code_of(lambda: b.proclaim(term.lease_id, term.fencing_token + 1,
                                          {"value": "x"})) == "FAILED_PRECONDITION",
               "a wrong token is refused")
        expect(code_of(lambda: b.proclaim(term.lease_id, 0, {"value": "x"})) ==
               "INVALID_ARGUMENT", "token 0 is invalid")
        expect(b.describe(name).holders[0].metadata["value"] == "alice:2", "refusal changed it")
        expect(el.resign(), "resign")
        expect(said == [(True, "ACQUIRED"), (False, "RESIGNED")], "said %r" % said)
        watcher.wait_for(lambda i: i.kind == NO_LEADER, "no leader after resign")
        # The released lease: NOT_FOUND; the helper refuses without a term.
        expect(code_of(lambda: b.proclaim(term.lease_id, term.fencing_token,
                                          {"value": "x"})) == "NOT_FOUND", "released lease")
        expect(code_of(lambda: el.proclaim("late")) == "FAILED_PRECONDITION", "no term")
        # A stale token from the earlier term against the new term's lease.
        el2 = Election(b, name, owner="bob")
        term2 = el2.campaign("bob:1", timeout=WITHIN)
        expect(term2.fencing_token > term.fencing_token, "terms increase")
        expect(code_of(lambda: a.proclaim(term2.lease_id, term.fencing_token,
                                          {"value": "x"})) == "FAILED_PRECONDITION",
               "the earlier term's token")
        el2.resign()
    finally:
        watcher.close()


@check
def resign_hands_over_in_order(env):
    from turnstile import NO_LEADER
    from turnstile import Election
    a, b, c = env["a"], env["b"], env["c"]
    name = "el/handover"
    log, log_mu = [], threading.Lock()

    def said_by(who):
        def said(ok, why):
            with log_mu:
                log.append((who, ok, why))
        return said

    watcher = Watcher(a.observe(name))
    try:
        first = Election(a, name, owner="a", on_leadership=said_by("a"))
        t1 = first.campaign("a", timeout=WITHIN)
        results = {}

        def run(who, client):
            el = Election(client, name, owner=who, on_leadership=said_by(who))
            results[who] = (el, el.campaign(who, timeout=WITHIN))

        threads = []
        for who, client, waiting in (("b", b, 1), ("c", c, 2)):
            th = threading.Thread(target=run, args=(who, client), daemon=True)
            th.start()
            threads.append(th)
            # Queue b before c: wait until Describe shows the waiter.
            wait_until(lambda: (lambda d: d is not None and len(d.waiters) >= waiting)(
                a.describe(name)), "%s to queue" % who)
        first.resign()
        threads[0].join(WITHIN)
        expect("b" in results, "b leads after a resigns")
        el_b, t2 = results["b"]
        seen_b = watcher.wait_for(is_leader("b", t2.fencing_token), "b leading")
        el_b.resign()
        threads[1].join(WITHIN)
        expect("c" in results, "c leads after b resigns")
        el_c, t3 = results["c"]
        seen_c = watcher.wait_for(is_leader("c", t3.fencing_token), "c leading", seen_b)
        el_c.resign()
        watcher.wait_for(lambda i: i.kind == NO_LEADER, "no leader at the end", seen_c)
        # Every "not leader" is said before the next candidate is told it leads.
        expect(log == [("a", True, "ACQUIRED"), ("a", False, "RESIGNED"),
                       ("b", True, "ACQUIRED"), ("b", False, "RESIGNED"),
                       ("c", True, "ACQUIRED"), ("c", False, "RESIGNED")], "said %r" % log)
        tokens = [t1.fencing_token, t2.fencing_token, t3.fencing_token]
        expect(tokens == sorted(tokens) and len(set(tokens)) == 3, "terms %r" % tokens)
        # Observers see a, b, c in that order (no other leader in between).
        leaders = [i.leader.value for i in watcher.items if i.leader is not None]
        expect(leaders == ["a", "b", "c"], "observed leaders %r" % leaders)
    finally:
        watcher.close()


@check
def campaign_requeues_past_a_replicas_wait_limit(env):
    from turnstile import Election
    a, capped = env["a"], env["capped"]  # capped: --max-wait-timeout 1s
    name = "el/capped"
    holder = Election(a, name, owner="holder")
    holder.campaign("h", timeout=WITHIN)
    attempts, fourth = [], threading.Event()

    class Counting:
        """The capped replica's client, counting the campaign's Acquires."""

        def __getattr__(self, attr):
            return getattr(capped, attr)

        def acquire(self, *args, **kw):
            attempts.append(kw.get("wait_timeout"))
            if len(attempts) >= 4:
                fourth.set()
            return capped.acquire(*args, **kw)

    result = {}

    def run():
        try:
            result["term"] = Election(Counting(), name, owner="patient").campaign(
                "p", timeout=WITHIN)
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    # 1: asks ~15 s (refused, the limit learnt), 2 and 3: 1 s waits that
    # time out, 4: waiting when the holder resigns.
    expect(fourth.wait(WITHIN), "the campaign re-queued (attempts %r)" % attempts)
    holder.resign()
    th.join(WITHIN)
    expect("term" in result, "campaign ended with %r" % result.get("error"))
    expect(attempts[0] > 1.0 and all(w <= 1.0 for w in attempts[1:]),
           "waits asked %r" % attempts)
    d = a.describe(name)
    expect(d.holders[0].owner == "patient" and not d.waiters, "describe %r" % d)
    a.release(result["term"].lease_id)


@check
def acquire_all_never_deadlocks(env):
    sets = [["mx/a", "mx/b", "mx/c"], ["mx/c", "mx/a"], ["mx/b", "mx/c"], ["mx/c", "mx/b", "mx/a"]]
    clients = [env["a"], env["b"], env["c"], env["a"]]
    wait = 8.0
    holding, mu = {}, threading.Lock()
    problems, counts = [], [0] * len(sets)

    def worker(k):
        for _ in range(6):
            started = time.monotonic()
            try:
                multi = clients[k].acquire_all(sets[k], wait_timeout=wait, owner="w%d" % k)
            except Exception as e:  # noqa: BLE001
                problems.append("worker %d: %r after %.1fs" % (k, e, time.monotonic() - started))
                return
            took = time.monotonic() - started
            if took > wait + 2:
                problems.append("worker %d took %.1fs" % (k, took))
            with mu:
                for n in multi.locks:
                    if n in holding:
                        problems.append("%s held by %s and %d" % (n, holding[n], k))
                    holding[n] = k
            # Work under the locks: the replicas must show us as every holder.
            for n, token in multi.fencing_tokens.items():
                d = clients[k].describe(n)
                if [h.fencing_token for h in d.holders] != [token]:
                    problems.append("%s: describe shows %r, we hold %d" % (
                        n, [h.fencing_token for h in d.holders], token))
            with mu:
                for n in multi.locks:
                    del holding[n]
            multi.release()
            counts[k] += 1

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(len(sets))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(wait * 6 + 10)
    expect(not any(th.is_alive() for th in threads), "a worker is stuck")
    expect(not problems, "; ".join(problems))
    expect(counts == [6] * len(sets), "rounds %r" % counts)
    for n in ("mx/a", "mx/b", "mx/c"):
        expect(env["b"].describe(n) is None, "%s left held" % n)


@check
def failed_acquire_all_leaves_nothing_held(env):
    from turnstile import LOST
    a, b = env["a"], env["b"]
    blocker = b.acquire("mf/2", wait_timeout=0, owner="blocker")
    try:
        started = time.monotonic()
        code = code_of(lambda: a.acquire_all(["mf/3", "mf/2", "mf/1"], wait_timeout=1.0))
        took = time.monotonic() - started
        expect(code == "DEADLINE_EXCEEDED" and took < 4.0, "%s after %.1fs" % (code, took))
        code = code_of(lambda: a.acquire_all(["mf/1", "mf/2", "mf/3"], wait_timeout=0))
        expect(code == "FAILED_PRECONDITION", "try-once: %s" % code)
        expect(code_of(lambda: a.acquire_all(["mf/1", "mf/1"], 1.0)) == "INVALID_ARGUMENT",
               "duplicates")
        for n in ("mf/1", "mf/3"):
            expect(b.describe(n) is None, "%s left held: %r" % (n, b.describe(n)))
        d = b.describe("mf/2")
        expect([h.owner for h in d.holders] == ["blocker"] and not d.waiters, "mf/2 %r" % d)
    finally:
        blocker.release()
    # Losing one lock of a held set loses the set; the others are let go.
    seen = []
    multi = a.acquire_all(["ml/1", "ml/2"], wait_timeout=5, on_state=lambda *s: seen.append(s))
    tokens = multi.fencing_tokens
    expect(len(set(tokens.values())) == 2 and all(tokens.values()), "tokens %r" % tokens)
    b.release(multi.lease_ids["ml/1"])
    wait_until(lambda: multi.state == LOST, "the set to be lost")
    expect(seen == [(LOST, "ml/1", "DELETED")], "on_state %r" % seen)
    wait_until(lambda: b.describe("ml/2") is None, "ml/2 to be let go")


@check
def observer_reobserves_when_its_replica_drains(env):
    """Last: it stops replica 0."""
    from turnstile import UNKNOWN, Client
    from turnstile import Election
    name = "el/drain"
    el = Election(env["b"], name, owner="stays")       # held through replica 2
    term = el.campaign("v", timeout=WITHIN)
    r0, r2 = env["replicas"][0], env["replicas"][2]
    with Client("ipv4:%s,%s" % (r0.address, r2.address)) as via_both:
        watcher = Watcher(via_both.observe(name))
        try:
            i = watcher.wait_for(is_leader("v", term.fencing_token), "the leader")
            r0.signal(signal.SIGTERM)  # drains: the Observe stream ends UNAVAILABLE
            j = watcher.wait_for(lambda it: it.kind == UNKNOWN, "unknown while re-observing", i)
            watcher.wait_for(is_leader("v", term.fencing_token), "the leader again", j)
            expect(watcher.obs.reopened >= 1, "re-observed")
        finally:
            watcher.close()
    expect(el.is_leader(), "the leader on another replica is untouched")
    el.resign()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--package", help="the import root of the package turnstile "
                    "(default BUILD/python, where the CMake build assembles it)")
    ap.add_argument("-k", default="", help="run only checks whose name contains this")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.abspath(args.package or os.path.join(build, "python")))
    from turnstile import Client
    failed = 0
    started = time.monotonic()
    try:
        with harness.live_replicas(build, "py-election", count=3,
                                   extra={1: ["--max-wait-timeout", "1s"]}) as (replicas, _):
            clients = [Client(r.address) for r in replicas]
            clients.append(Client(replicas[2].address))  # a second channel to replica 2
            env = {"a": clients[0], "capped": clients[1], "b": clients[2], "c": clients[3],
                   "replicas": replicas}
            for fn in CHECKS:
                if args.k not in fn.__name__:
                    continue
                t0 = time.monotonic()
                try:
                    fn(env)
                    print("ok   %s (%.1fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
                except Exception as e:  # noqa: BLE001
                    failed += 1
                    print("FAIL %s: %s" % (fn.__name__, e), flush=True)
                    if not isinstance(e, Check):
                        traceback.print_exc()
            for c in clients:
                c.close()
    except harness.Failure as f:
        print("FAIL python_election_live: %s" % f)
        return 1
    print("%s: %d checks failed (%.1fs)" % ("FAIL" if failed else "PASS", failed,
                                           time.monotonic() - started))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
