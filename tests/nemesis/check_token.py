#!/usr/bin/python3
"""The fencing-token check under a partitioned follower.

A holder is killed and another client is granted: from the moment the new
grant is announced, a (linearizable) check of the old token must never
answer CURRENT, from any replica, and every replica that can reach a
quorum must answer SUPERSEDED. This holds on the nemesis suite's setup
(tests/nemesis/run_nemesis.py: a 3-member ensemble, tickTime 500 ms,
syncLimit 12, replicas ri pinned to member zki, 4 s sessions), with one
follower partitioned from the other two members while the hold changes
hands: a follower cut off from its leader keeps answering reads from its
old state for syncLimit x tickTime (6 s), so a read without ZooKeeper's
sync, through that follower's replica, still finds the killed holder's
node. The check's sync cannot complete there: that replica answers an
error (UNAVAILABLE, or the caller's deadline passes), never CURRENT.

Steps:
  1. ensemble and replicas up; zkF = a follower, rF its replica; rL and rO
     the replicas of the leader and of the other follower;
  2. holder H (`turnstile acquire`, via rL) holds lock `checked-<round>`, token
     T_old; waiter W (via rO) queues; every replica says CURRENT for T_old;
  3. zkF is cut off from the other two members;
  4. H is SIGKILLed; W's ACQUIRED (token T_new) is the announcement;
  5. the control that shows the partition is real: a ZooKeeper session
     on zkF opened before the cut (kazoo, no sync) still lists the killed
     holder's node; then for 8 s (past the 6 s after which zkF gives up)
     checks of T_old through every replica (`turnstile check`, 2 s
     deadline), each kind back to back, and rF's stale view (`--stale`,
     reported only: its reads queue behind the replica's own heartbeat
     syncs on that session, so it mostly times out);
  6. heal; once rF serves again, every replica answers SUPERSEDED for T_old
     and CURRENT for T_new.
Checked, in each of --rounds rounds (3; a lock each; the partitioned
follower alternates): no linearizable CURRENT for T_old after step 4, from
any replica; rL and rO answer SUPERSEDED for T_old (at least once each in
step 5) and CURRENT for T_new; rF does in step 6. A check that skipped the
sync (every check made --stale) was caught in 7 of 11 single rounds: its
first read through rF may queue behind one of the replica's own heartbeat
syncs (sent every 400 ms) and then only time out. Hence three rounds: it
failed 4 of 4 runs of three (in round 1 or 2).

    sudo /usr/bin/python3 tests/nemesis/check_token.py --turnstiled BUILD/server/turnstiled \\
        --cli BUILD/client/turnstile [--keep]

Runs as root (namespaces, iptables); about 12 s a round; --budget bounds it.
"""

import argparse
import faulthandler
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import netlab  # noqa: E402
import run_nemesis  # noqa: E402  (the ensemble and replicas, as the nemesis runs them)
from run_nemesis import REPLICAS, ZK, log, poll_until  # noqa: E402

SUBNET = "10.78.0"  # private to this lab's namespaces
LOCK = "checked-%d"  # one lock per round
ROUNDS = 3  # rounds of steps 2-6 (see main's --rounds)
CHECK_DEADLINE = "2s"  # each check's --rpc-timeout
WATCH_S = 8.0  # step 5: past the follower's give-up (syncLimit x tickTime = 6 s)
PARTITION_GIVE_UP_S = run_nemesis.SYNC_LIMIT * run_nemesis.TICK_MS / 1000.0


class Failed(Exception):
    pass


class Contender:
    """One `turnstile --output json acquire` process in the client
    namespace; its JSON lines, read by a thread."""

    def __init__(self, lab, cli, addr, owner, lock):
        self.owner = owner
        self.p = lab.popen("cl", [cli, "--server", addr, "--owner", owner, "--output", "json",
                                  "acquire", lock, "--wait", "60s", "--hold", "120s"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.events = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()

    def wait_event(self, kind, seconds):
        deadline = time.monotonic() + seconds
        with self.cond:
            while True:
                for ev in self.events:
                    if ev.get("event") == kind:
                        return ev
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None:
                    raise Failed("no %r from %s within %.0f s: %s"
                                 % (kind, self.owner, seconds, self.events))
                self.cond.wait(min(left, 0.2))


class Checks:
    """`turnstile check` processes (from the client namespace, which the
    main thread is in); every answer recorded."""

    def __init__(self, cli, cluster, lock):
        self.cli = cli
        self.c = cluster
        self.lock = lock
        self.answers = []  # (t, replica, token, stale, verdict or "ERROR: ...")

    def start(self, replica, token, stale=False):
        argv = [self.cli, "--server", self.c.replica_addr(replica), "--rpc-timeout",
                CHECK_DEADLINE, "--output", "json", "check", self.lock, str(token)]
        if stale:
            argv.append("--stale")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        return (replica, token, stale, p)

    def finish(self, started):
        replica, token, stale, p = started
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        verdict = "ERROR: no answer"
        for line in out.splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            verdict = j.get("verdict") or "ERROR: %s" % j.get("error")
            # The exit code must agree with the verdict (scripts rely on it).
            want = {"CURRENT": 0, "SUPERSEDED": 77, "WAITING": 78}.get(verdict, 1)
            if p.returncode != want:
                raise Failed("check via %s exited %s with %s" % (replica, p.returncode, line))
        self.answers.append((time.monotonic(), replica, token, stale, verdict))
        return verdict

    def round(self, requests):
        """Runs (replica, token, stale) checks in parallel; their verdicts."""
        started = [self.start(*r) for r in requests]
        return [self.finish(s) for s in started]


def run(args, lab, work):
    cluster_args = types.SimpleNamespace(turnstiled=args.turnstiled, cli=args.cli,
                                         replica_log_level="warn", clients=0)
    c = run_nemesis.Cluster(lab, work, cluster_args)
    c.start_all()
    for i in range(1, args.rounds + 1):
        one_round(args, lab, c, i)


def one_round(args, lab, c, i):
    """Steps 2-6 on lock checked-<i>."""
    c.wait_serving(REPLICAS, 60)
    c.wait_quorum(60)
    lock = LOCK % i
    leader = c.leader()
    followers = [z for z in ZK if z != leader]
    zk_f = followers[(i - 1) % 2]
    r_f, r_l, r_o = (REPLICAS[ZK.index(z)] for z in (zk_f, leader,
                                                      [f for f in followers if f != zk_f][0]))
    log("round %d: leader %s; partitioned follower will be %s (replica %s); holder via %s, "
        "waiter via %s" % (i, leader, zk_f, r_f, r_l, r_o))

    checks = Checks(args.cli, c, lock)
    holder = Contender(lab, args.cli, c.replica_addr(r_l), "holder", lock)
    t_old = int(holder.wait_event("acquired", 30)["fencing_token"])
    waiter = Contender(lab, args.cli, c.replica_addr(r_o), "waiter", lock)
    waiter.wait_event("queued", 30)
    # A plain ZooKeeper session on zkF, opened now: after the cut it reads
    # zkF's own state.
    from kazoo.client import KazooClient  # Debian's python3-kazoo
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    follower_view = KazooClient(hosts="%s:%d" % (c.zk_host(zk_f), run_nemesis.ZK_PORT),
                                timeout=20.0)
    follower_view.start(timeout=15)
    before = checks.round([(r, t_old, False) for r in REPLICAS])
    log("before the fault, T_old=%d: %s" % (t_old, dict(zip(REPLICAS, before))))
    if before != ["CURRENT"] * 3:
        raise Failed("the holder's token is not CURRENT everywhere: %s" % before)

    t_cut = time.monotonic()
    lab.isolate(zk_f, [z for z in ZK if z != zk_f])
    log("%s cut off from the other two members" % zk_f)
    os.kill(holder.p.pid, signal.SIGKILL)
    granted = waiter.wait_event("acquired", 30)
    t_grant = time.monotonic()
    t_new = int(granted["fencing_token"])
    log("holder killed; waiter granted T_new=%d, %.2f s after the cut" % (t_new, t_grant - t_cut))
    if not t_new > t_old:
        raise Failed("T_new %d is not above T_old %d" % (t_new, t_old))

    # The control, beside the checks (zkF may take a while to answer): zkF
    # still has the killed holder's node, where a check that skipped the
    # sync through rF would find it.
    lock_path = "/turnstile/" + lock
    stale_tokens = []

    def read_follower():
        try:
            for n in follower_view.get_children(lock_path):
                st = follower_view.exists(lock_path + "/" + n)
                if st is not None:
                    stale_tokens.append(st.czxid)
        except Exception as e:  # noqa: BLE001 - reported as a failed control
            stale_tokens.append("error: %r" % e)
    control = threading.Thread(target=read_follower, daemon=True)
    control.start()

    # Step 5: every check from here on was sent after the announcement.
    # Each kind of check runs back to back, on its own: a slow one (rF's
    # sync, until its deadline) does not hold up the others.
    # rF's linearizable check first, before anything else reaches rF's
    # session: a check that skipped the sync would read zkF's state and
    # say CURRENT here (unless a heartbeat sync of the replica's, every
    # 400 ms, happens to be queued on that session already). rF's stale
    # view last (reported only).
    kinds = [(r_f, t_old, False)]
    kinds += [(r, t_old, False) for r in REPLICAS if r != r_f]
    kinds += [(r_l, t_new, False), (r_o, t_new, False), (r_f, t_old, True)]
    running = {k: checks.start(*k) for k in kinds}
    while running:
        for k, started in list(running.items()):
            if started[3].poll() is None:
                continue
            checks.finish(started)
            if time.monotonic() < t_grant + WATCH_S:
                running[k] = checks.start(*k)
            else:
                del running[k]
        time.sleep(0.01)  # polling the check processes
    log("%d checks in %.1f s after the grant" % (len(checks.answers) - 3,
                                                  time.monotonic() - t_grant))

    control.join(30)
    follower_view.stop()
    log("%s's own view after the grant: contender tokens %s" % (zk_f, stale_tokens))
    if t_old not in stale_tokens:
        raise Failed("the control failed: %s no longer had the old holder's node (%s), so the "
                     "partition left no stale follower" % (zk_f, stale_tokens))

    lab.heal_all()
    log("healed; waiting for %s to serve again" % r_f)
    c.wait_serving(REPLICAS, 60)
    # Step 6: rF reconnected (its session expired meanwhile); a few rounds
    # until its answer is in (each bounded).
    deadline = time.monotonic() + 30
    while True:
        got = checks.round([(r, t_old, False) for r in REPLICAS] +
                           [(r, t_new, False) for r in REPLICAS])
        if got == ["SUPERSEDED"] * 3 + ["CURRENT"] * 3:
            break
        if time.monotonic() > deadline:
            raise Failed("after the heal: T_old %s, T_new %s" % (got[:3], got[3:]))

    # ---- the verdict
    after = [a for a in checks.answers if a[0] >= t_grant]
    table = {}
    for _, r, tok, stale, verdict in after:
        key = "%s %s%s" % (r, "T_old" if tok == t_old else "T_new", " stale" if stale else "")
        table.setdefault(key, {}).setdefault(verdict, 0)
        table[key][verdict] += 1
    log("answers after the grant (replica, token: verdict counts):")
    for key in sorted(table):
        log("  %-18s %s" % (key, table[key]))
    bad = [a for a in after if a[2] == t_old and not a[3] and a[4] == "CURRENT"]
    if bad:
        raise Failed("%d linearizable checks answered CURRENT for the old token after the new "
                     "grant, e.g. via %s %.2f s after it" % (len(bad), bad[0][1],
                                                            bad[0][0] - t_grant))
    for r in (r_l, r_o):
        if table.get("%s T_old" % r, {}).get("SUPERSEDED", 0) == 0:
            raise Failed("%s (it reaches a quorum) never answered SUPERSEDED for T_old" % r)
        if table.get("%s T_new" % r, {}).get("CURRENT", 0) == 0:
            raise Failed("%s never answered CURRENT for T_new" % r)
    log("round %d passed: never CURRENT for T_old after the grant (%d linearizable checks); SUPERSEDED "
        "from %s and %s during the partition, from all three after it; %s's stale view said "
        "CURRENT %d times" % (i, sum(1 for a in after if a[2] == t_old and not a[3]), r_l, r_o,
                              r_f, table.get("%s T_old stale" % r_f, {}).get("CURRENT", 0)))
    for p in (holder.p, waiter.p):
        netlab.Lab.stop(p, timeout=5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turnstiled", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--budget", type=float, default=240,
                    help="seconds after which the run prints every thread's stack and fails")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help="rounds (a lock each; the partitioned follower alternates); a check "
                         "that skipped the sync is caught in most single rounds (its read may "
                         "queue behind a heartbeat sync of the replica), so several")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = ap.parse_args()

    why = netlab.cannot_run("check_token", "sudo ctest -R nemesis_check_token")
    if why:
        print(why, file=sys.stderr)
        return 2
    for b in (args.turnstiled, args.cli):
        if not os.access(b, os.X_OK):
            print("check_token: %s is not built" % b, file=sys.stderr)
            return 2
    faulthandler.dump_traceback_later(args.budget, exit=True)
    netlab.install_signal_handlers()
    netlab.sweep_stale(log)
    work = args.work_dir or tempfile.mkdtemp(prefix="check_token.")
    os.makedirs(work, exist_ok=True)
    lab = netlab.Lab(run_nemesis.NODES, subnet=SUBNET, log=log)
    ok = False
    try:
        lab.up()
        netlab.setns(lab.ns("cl"))  # the checks and probes go from the client namespace
        run(args, lab, work)
        ok = True
        log("PASS: %d rounds" % args.rounds)
    except Failed as e:
        log("FAIL: %s" % e)
    finally:
        lab.close()
        faulthandler.cancel_dump_traceback_later()
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log("work dir kept: %s" % work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
