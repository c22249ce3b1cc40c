#!/usr/bin/python3
"""Short outages: a replica cut from ZooKeeper for 1.7 s, then healed.

SPEC section 4: a replica that loses ZooKeeper tells its holders SUSPENDED
with the safe time left; back in time, RESUMED and nothing is lost. A 1.7 s
blip is well within a 4 s session, so every run must end RESUMED.

The lab (tests/nemesis/netlab.py): one standalone ZooKeeper ("zk") and one
turnstiled ("r1", --zk-session-timeout 4s) in network namespaces of their
own on one bridge; the holder (short_outage_holder, the raw Acquire stream)
runs in r1's namespace and talks to r1 over the bridge, which is never cut.
Two kinds of cut between r1 and zk, --runs of each:
  silent  every packet between them dropped (iptables-legacy DROP, both
          sides): TCP retransmits with its backoff and sees nothing;
  reset   every TCP segment either gets from the other answered with a TCP
          reset (REJECT --reject-with tcp-reset in each side's INPUT):
          the connection breaks at the next send, reconnects are refused.
Per run: the holder acquires, a random phase (0..1 s, so the cut lands
anywhere in the replica's heartbeat cycle), the cut, 1.7 s, the heal. Then
wait (with a deadline) for RESUMED or LOST. Recorded: ms from the cut to
SUSPENDED, the safe_for it carried, the outcome, ms from the heal to
RESUMED; a table per kind at the end (and --json).

Exit 0 only if every run of every kind saw SUSPENDED and then RESUMED.
Must run as root (namespaces, iptables); bounded (--budget seconds).

Measured (seed 31, 2 cores; ms; SUSPENDED counted from the cut, RESUMED
from the heal):

  build                    kind    SUSPENDED     safe_for      RESUMED  heal->RESUMED
                                   median/max    median/min             median/max
  before (c5609c7)         silent  1764/2481     398/295       4 of 20  356/998
                           reset   1676/2371     399/399       3 of 20  33/1032
  engine heartbeat only    silent  632/791       1998/1993     20 of 20 662/999
                           reset   1690/1972     799/796       7 of 20  51/1018
  zk connection only       silent  1754/1820     788/0         15 of 20 87/117
                           reset   277/774       1999/1995     20 of 20 34/122
  both                     silent  562/787       1998/1984     20 of 20 74/112
                           reset   216/385       2399/2398     20 of 20 39/120

Before, most runs were never told SUSPENDED (the holder's refreshes simply
resumed), and with the default pool of four sessions one ended LOST.

    sudo /usr/bin/python3 tests/nemesis/short_outage.py --turnstiled BUILD/server/turnstiled \
        --cli BUILD/client/turnstile --holder BUILD/tests/short_outage_holder [--runs 20]
"""

import argparse
import faulthandler
import json
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import netlab  # noqa: E402

SUBNET = "10.79.0"  # private to this lab's namespaces (the nemesis uses 10.77.0)
NODES = [("zk", 11), ("r1", 21)]
ZK_PORT = 2181
REPLICA_PORT = 7400
SESSION_MS = 4000
CUT_S = 1.7
# After the heal: the answer (RESUMED, or LOST once the safe time or the
# session has run out) comes within the session timeout; the rest is slack.
OUTCOME_DEADLINE_S = SESSION_MS / 1000 + 2

T0 = time.monotonic()


def log(msg):
    print("[%7.2fs] %s" % (time.monotonic() - T0, msg), flush=True)


def poll_until(cond, seconds, what, interval=0.05):
    deadline = time.monotonic() + seconds
    while True:
        r = cond()
        if r:
            return r
        if time.monotonic() > deadline:
            raise TimeoutError("timed out after %.0f s waiting for %s" % (seconds, what))
        time.sleep(interval)


class Holder:
    """One short_outage_holder process; its lines, timestamped by itself."""

    def __init__(self, lab, args, name):
        self.lines = queue.Queue()
        self.events = []  # (t_ns, type, rest)
        self.p = lab.popen("r1", [args.holder, "%s:%d" % (lab.ip("r1"), REPLICA_PORT), name],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            parts = raw.decode(errors="replace").split()
            if len(parts) >= 2 and parts[0].isdigit():
                self.lines.put((int(parts[0]), parts[1], parts[2:]))
        self.lines.put(None)  # EOF

    def wait_for(self, types, deadline):
        """The first event of one of `types` (others are kept), or None at
        the deadline (monotonic seconds) or EOF."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                item = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if item is None:
                self.lines.put(None)
                return None
            self.events.append(item)
            if item[1] in types:
                return item

    def stop(self):
        netlab.Lab.stop(self.p, timeout=5)


class ShortOutage:
    def __init__(self, lab, work, args):
        self.lab = lab
        self.work = work
        self.args = args
        self.zk = None
        self.replica = None

    # ---- the stack
    def start_zk(self):
        d = os.path.join(self.work, "zk")
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        with open(os.path.join(d, "zoo.cfg"), "w") as f:
            f.write("""tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=%s/data
clientPort=%d
clientPortAddress=%s
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
maxClientCnxns=0
forceSync=no
""" % (d, ZK_PORT, self.lab.ip("zk")))
        cp = ":".join(["/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar",
                       "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"])
        out = open(os.path.join(self.work, "zk.log"), "a")
        self.zk = self.lab.popen("zk", [
            "java", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false", "-cp", cp,
            "org.apache.zookeeper.server.ZooKeeperServerMain", os.path.join(d, "zoo.cfg")],
            stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def start_replica(self):
        out = open(os.path.join(self.work, "r1.log"), "a")
        self.replica = self.lab.popen("r1", [
            self.args.turnstiled, "--listen", "%s:%d" % (self.lab.ip("r1"), REPLICA_PORT),
            "--zk", "%s:%d" % (self.lab.ip("zk"), ZK_PORT),
            "--zk-session-timeout", "%dms" % SESSION_MS, "--replica-id", "r1",
            # One session: the holder's. With the default pool of four, every
            # session is cut but a run ends when the holder's has recovered;
            # another one still waiting out TCP's backoff would start the
            # next run (whose lock may hash to it) already cut off.
            "--zk-sessions", "1",
            "--drain-timeout", "1s", "--metrics-listen", "127.0.0.1:9464"] + (["--log-level", os.environ["SO_LOG"]] if os.environ.get("SO_LOG") else []),
            stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def health(self):
        try:
            p = subprocess.run(["ip", "netns", "exec", self.lab.ns("r1"), self.args.cli,
                                "--server", "%s:%d" % (self.lab.ip("r1"), REPLICA_PORT),
                                "--rpc-timeout", "1s", "health"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=5)
        except subprocess.TimeoutExpired:
            return "ERROR: probe timed out"
        return p.stdout.strip()

    def wait_serving(self, seconds):
        def ok():
            for name, p in (("zk", self.zk), ("r1", self.replica)):
                if p.poll() is not None:
                    raise RuntimeError("%s exited with %s" % (name, p.returncode))
            return self.health() == "SERVING"
        poll_until(ok, seconds, "r1 SERVING")

    # ---- faults: rules in netlab's NEMESIS chains, removed by lab.heal
    def cut(self, kind):
        key = ("r1", "zk")
        if kind == "silent":
            # r1's side first: that alone cuts r1 off. The cut's time is
            # taken just before r1's first rule goes in (nothing can react
            # to the cut before it; after the rule command returns, a
            # loaded machine may already have delivered the reaction).
            for node, other in (("r1", "zk"), ("zk", "r1")):
                if node == "r1":
                    t_cut = time.monotonic_ns()
                self.lab._add_rule(key, node, "NEMESIS-OUT", ["-d", self.lab.ip(other), "-j", "DROP"])
                self.lab._add_rule(key, node, "NEMESIS-IN", ["-s", self.lab.ip(other), "-j", "DROP"])
        else:
            # Each side answers every TCP segment from the other with a
            # reset, and lets the other's resets in. (A REJECT in OUTPUT
            # would not do: its reset, made for the local sender, was not
            # taken by the local socket here.)
            # The cut's time: just before r1's rule, as above (a reset
            # cut's SUSPENDED came 4-8 ms before the time taken after the
            # rule command returned, on a loaded machine).
            for node, other in (("r1", "zk"), ("zk", "r1")):
                if node == "r1":
                    t_cut = time.monotonic_ns()
                self.lab._add_rule(key, node, "NEMESIS-IN",
                                   ["-s", self.lab.ip(other), "-p", "tcp", "!", "--tcp-flags",
                                    "RST", "RST", "-j", "REJECT", "--reject-with", "tcp-reset"])
        return t_cut

    def heal(self):
        self.lab.heal("r1", "zk")
        return time.monotonic_ns()

    # ---- one run
    def run_once(self, kind, i, rng):
        self.wait_serving(30)
        h = Holder(self.lab, self.args, "short-outage-%s-%d" % (kind, i))
        try:
            acq = h.wait_for({"ACQUIRED", "LOST", "END"}, time.monotonic() + 15)
            if acq is None or acq[1] != "ACQUIRED":
                raise RuntimeError("run %s/%d: not acquired: %s" % (kind, i, h.events))
            # The fault schedule: a random phase, the cut, CUT_S, the heal.
            time.sleep(rng.uniform(0, 1.0))
            t_cut = self.cut(kind)
            time.sleep(max(0.0, t_cut / 1e9 + CUT_S - time.monotonic()))
            t_heal = self.heal()
            if self.args.verbose:
                log("    cut at %s, healed %.3f s later (wall clock)" % (
                    time.strftime("%H:%M:%S", time.localtime(time.time() - (t_heal - t_cut) / 1e9)),
                    (t_heal - t_cut) / 1e9))
            # Events during the cut were queued by the reader; the outcome
            # comes within the deadline.
            deadline = t_heal / 1e9 + OUTCOME_DEADLINE_S
            while True:
                end = h.wait_for({"RESUMED", "LOST", "END", "STILL_HELD"}, deadline)
                susp = [e for e in h.events if e[1] == "SUSPENDED" and e[0] >= t_cut]
                # A refresh after the heal with no SUSPENDED: the replica
                # never told the holder of the outage. (STILL_HELD is only
                # sent while not suspended, so it ends a suspended run only
                # after RESUMED.)
                if end is None or end[1] != "STILL_HELD" or (not susp and end[0] > t_heal):
                    break
            r = {"kind": kind, "run": i, "cut_ms": round((t_heal - t_cut) / 1e6)}
            if susp:
                r["suspended_ms"] = round((susp[0][0] - t_cut) / 1e6)
                r["safe_for_ms"] = int(susp[0][2][0]) if susp[0][2] else None
            if end is None:
                r["outcome"] = "NONE"
            elif end[1] == "STILL_HELD":
                r["outcome"] = "NEVER-SUSPENDED"
            elif end[1] == "RESUMED":
                r["outcome"] = "RESUMED" if susp else "RESUMED-WITHOUT-SUSPENDED"
                r["heal_to_resumed_ms"] = round((end[0] - t_heal) / 1e6)
            else:
                r["outcome"] = end[1] + ((" " + " ".join(end[2])) if end[2] else "")
                r["heal_to_end_ms"] = round((end[0] - t_heal) / 1e6)
            r["ok"] = bool(susp) and r["outcome"] == "RESUMED"
            # Every event of the hold, ms from the cut (for the record).
            r["events"] = ["%s@%d" % (e[1], round((e[0] - t_cut) / 1e6)) for e in h.events
                           if e[1] != "STILL_HELD" or self.args.verbose]
            return r
        finally:
            h.stop()


def summarize(results, kind):
    rs = [r for r in results if r["kind"] == kind]
    susp = [r["suspended_ms"] for r in rs if "suspended_ms" in r]
    safe = [r["safe_for_ms"] for r in rs if r.get("safe_for_ms") is not None]
    res = [r["heal_to_resumed_ms"] for r in rs if r["outcome"] == "RESUMED"]
    med = lambda xs: ("%.0f" % statistics.median(xs)) if xs else "-"  # noqa: E731
    return ("| %-6s | %s / %s | %s / %s | %d of %d | %s / %s |" % (
        kind, med(susp), max(susp) if susp else "-", med(safe), min(safe) if safe else "-",
        sum(1 for r in rs if r["ok"]), len(rs), med(res), max(res) if res else "-"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turnstiled", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--holder", required=True)
    ap.add_argument("--runs", type=int, default=20, help="runs per kind")
    ap.add_argument("--kinds", default="silent,reset")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--budget", type=float, default=330,
                    help="seconds after which the run prints every thread's stack and fails")
    ap.add_argument("--json", default=None, help="write every run's record here")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    ap.add_argument("--verbose", action="store_true", help="list STILL_HELD events too")
    args = ap.parse_args()

    why = netlab.cannot_run("short_outage", "sudo ctest -R short_outage")
    if why:
        print(why, file=sys.stderr)
        return 2
    faulthandler.dump_traceback_later(args.budget, exit=True)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    log("seed %d" % seed)

    netlab.install_signal_handlers()
    netlab.sweep_stale(log)
    work = args.work_dir or tempfile.mkdtemp(prefix="short_outage.")
    os.makedirs(work, exist_ok=True)
    lab = netlab.Lab(NODES, subnet=SUBNET, log=log)
    results = []
    failed = False
    try:
        lab.up()
        so = ShortOutage(lab, work, args)
        so.start_zk()
        poll_until(lambda: _ruok(lab), 60, "ZooKeeper to answer", 0.2)
        so.start_replica()
        so.wait_serving(60)
        for kind in args.kinds.split(","):
            for i in range(1, args.runs + 1):
                r = so.run_once(kind, i, rng)
                results.append(r)
                log("%-6s run %2d: cut %d ms, SUSPENDED at %s ms safe_for %s ms, %s%s" % (
                    kind, i, r["cut_ms"], r.get("suspended_ms", "-"), r.get("safe_for_ms", "-"),
                    r["outcome"],
                    (", %d ms after the heal" % r["heal_to_resumed_ms"])
                    if "heal_to_resumed_ms" in r else ""))
                if not r["ok"]:
                    log("    events (ms from the cut): %s" % " ".join(r["events"]))
                failed = failed or not r["ok"]
        print("\n| kind | SUSPENDED after the cut, ms (median / max) | safe_for, ms "
              "(median / min) | RESUMED | heal -> RESUMED, ms (median / max) |")
        print("|---|---|---|---|---|")
        for kind in args.kinds.split(","):
            print(summarize(results, kind))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"seed": seed, "runs": results}, f, indent=1)
    except BaseException:
        failed = True
        for name in ("r1.log", "zk.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-30:]
                print("---- last lines of %s\n%s" % (name, "".join(tail)), file=sys.stderr)
        raise
    finally:
        lab.close()
        faulthandler.cancel_dump_traceback_later()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log("work dir kept: %s" % work)
    bad = [r for r in results if not r["ok"]]
    if bad:
        print("FAIL: %d of %d runs did not see SUSPENDED then RESUMED: %s" % (
            len(bad), len(results), ", ".join("%s/%d %s" % (r["kind"], r["run"], r["outcome"])
                                              for r in bad)))
    return 1 if failed else 0


def _ruok(lab):
    """ZooKeeper answers 'ruok' (asked from inside r1's namespace)."""
    try:
        out = subprocess.run(["ip", "netns", "exec", lab.ns("r1"), "/usr/bin/python3", "-c",
                              "import socket,sys\n"
                              "s=socket.create_connection((sys.argv[1],%d),timeout=1)\n"
                              "s.sendall(b'ruok');print(s.recv(16).decode())" % ZK_PORT,
                              lab.ip("zk")],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             timeout=5).stdout
    except subprocess.TimeoutExpired:
        return False
    return out.strip() == "imok"


if __name__ == "__main__":
    sys.exit(main())
