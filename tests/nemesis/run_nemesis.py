#!/usr/bin/python3
"""Partition fault suite of turnstile (issue 11): the orchestrator.

Builds a network lab (tests/nemesis/netlab.py): namespaces zk1..zk3 (a
3-member ZooKeeper ensemble), r1..r3 (turnstiled replicas, ri pinned to zki),
cl (the careful clients, tests/nemesis/nemesis_client.cc, one process each),
all on one bridge. Then a nemesis injects faults, first one at a time (each
kind once), then random combinations (seeded), until --duration seconds of
schedule have passed; every fault is injected, held, healed, and followed by
a wait (with a deadline) until a lock is granted again. At the end: clients
stopped, orphan contender nodes and replica health probed, and the checker
(tests/nemesis/check_history.py) run over the recorded history.

    sudo /usr/bin/python3 tests/nemesis/run_nemesis.py --turnstiled BUILD/server/turnstiled \
        --client BUILD/tests/nemesis_client --delay-bin BUILD/tests/nemesis_delay \
        [--seed N] [--duration S] [--only FAULT[,FAULT]] [--work-dir DIR] [--keep]

Exit status 0 only if the checker found no violation. Must run as root.
"""

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import netlab  # noqa: E402
import check_history  # noqa: E402

SUBNET = "10.77.0"
ZK = ["zk1", "zk2", "zk3"]
REPLICAS = ["r1", "r2", "r3"]
NODES = [("zk1", 11), ("zk2", 12), ("zk3", 13), ("r1", 21), ("r2", 22), ("r3", 23), ("cl", 30)]
ZK_PORT = 2181
REPLICA_PORT = 7400
# Short holds (throughput) on two locks; long holds (3-14 s, so that a fault
# aimed at the holder's replica lands in the middle of a hold) on a third.
SHORT_LOCKS = ["nemesis-a", "nemesis-b"]
LONG_LOCK = "nemesis-long"
LOCKS = SHORT_LOCKS + [LONG_LOCK]

# ZooKeeper timing: tickTime 500 ms; a follower cut off from the leader
# notices after syncLimit * tickTime = 6 s, LONGER than the replicas' 4 s
# session timeout, so a replica connected to a partitioned follower keeps
# getting answers (reads) for ~2 s after the leader expired its session.
TICK_MS = 500
INIT_LIMIT = 10
SYNC_LIMIT = 12
SESSION_MS = 4000
# Heal -> next grant must be <= session timeout + this slack. The slack
# covers restarting a JVM (a ZooKeeper member, or all three) and a leader
# election on a loaded 2-core machine, plus a replica's reconnect backoff.
HEAL_SLACK_MS = 8000

FAULTS = ["replica-kill", "leader-kill", "follower-kill", "follower-partition", "replica-zk-cut",
          "replica-pause", "ensemble-down-brief", "ensemble-down-long", "client-kill",
          "link-delay", "link-loss"]

# Share of replica-scoped faults aimed at the replica of a current long hold.
TARGET_PROB = 0.75

T0 = time.monotonic_ns()


def now():
    return time.monotonic_ns()


def log(msg):
    print("[%8.2fs] %s" % ((now() - T0) / 1e9, msg), flush=True)


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def expired(self):
        return time.monotonic() >= self.end


def poll_until(cond, seconds, what, interval=0.1):
    """Polls cond() until it returns a true value or `seconds` pass."""
    d = Deadline(seconds)
    while True:
        r = cond()
        if r:
            return r
        if d.expired():
            raise TimeoutError("timed out after %.0f s waiting for %s" % (seconds, what))
        time.sleep(interval)


def four_letter(host, cmd, timeout=2.0):
    try:
        with socket.create_connection((host, ZK_PORT), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(cmd.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return None


def zk_mode(host):
    out = four_letter(host, "srvr")
    if not out:
        return None
    for line in out.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


# ------------------------------------------------------------------ history tail
class Tracker:
    """Tails the clients' history files: grant times, who holds now."""

    def __init__(self, hist_dir):
        self.dir = hist_dir
        self.offsets = {}
        self.grants = 0
        self.last_grant_t = 0
        self.holding = {}  # client -> grant event (granted, release not started)
        self.grant_times = []

    def update(self):
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            off = self.offsets.get(path, 0)
            with open(path) as f:
                f.seek(off)
                data = f.read()
            end = data.rfind("\n")
            if end < 0:
                continue
            self.offsets[path] = off + len(data[:end + 1].encode())
            for line in data[:end + 1].splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                ev = e.get("ev")
                if ev == "grant":
                    self.grants += 1
                    self.last_grant_t = max(self.last_grant_t, e["t"])
                    self.grant_times.append(e["t"])
                    self.holding[e["client"]] = e
                elif ev in ("release_start", "stop_using", "exit", "start"):
                    self.holding.pop(e["client"], None)

    def long_holder(self, min_remaining_s):
        """(client, grant) of a hold of LONG_LOCK that plans to go on for
        at least min_remaining_s, or None."""
        self.update()
        t = now()
        for cid, g in sorted(self.holding.items()):
            if g.get("lock") == LONG_LOCK and g["t"] + g.get("plan_ms", 0) * 1e6 - t >= min_remaining_s * 1e9:
                return cid, g
        return None

    def grant_after(self, t):
        self.update()
        return self.last_grant_t > t


# ------------------------------------------------------------------ cluster
class Cluster:
    def __init__(self, lab, work, args):
        self.lab = lab
        self.work = work
        self.args = args
        self.zk = {}  # name -> Popen
        self.replicas = {}
        self.clients = {}  # id -> Popen
        self.client_replica = {}
        self.nemesis_log = open(os.path.join(work, "nemesis.jsonl"), "a")
        for d in ("history", "register", "logs"):
            os.makedirs(os.path.join(work, d), exist_ok=True)
        self.tracker = Tracker(os.path.join(work, "history"))

    def record(self, ev, **kw):
        kw.update(t=now(), ev=ev)
        self.nemesis_log.write(json.dumps(kw, sort_keys=True) + "\n")
        self.nemesis_log.flush()

    # ---- ZooKeeper
    def zk_host(self, name):
        return self.lab.ip(name)

    def write_zk_config(self, name):
        i = ZK.index(name) + 1
        d = os.path.join(self.work, name)
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        with open(os.path.join(d, "data", "myid"), "w") as f:
            f.write("%d\n" % i)
        servers = "\n".join("server.%d=%s:2888:3888" % (j + 1, self.zk_host(z))
                            for j, z in enumerate(ZK))
        with open(os.path.join(d, "zoo.cfg"), "w") as f:
            f.write("""tickTime=%d
initLimit=%d
syncLimit=%d
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=%s/data
clientPort=%d
clientPortAddress=%s
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
forceSync=no
preAllocSize=1024
%s
""" % (TICK_MS, INIT_LIMIT, SYNC_LIMIT, d, ZK_PORT, self.zk_host(name), servers))

    def start_zk(self, name):
        d = os.path.join(self.work, name)
        cp = ":".join(["/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar",
                       "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"])
        out = open(os.path.join(self.work, "logs", name + ".log"), "a")
        # cnxTimeout: election connections to a cut-off member give up after
        # 1 s instead of 5 s.
        self.zk[name] = self.lab.popen(name, [
            "java", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.cnxTimeout=1000",
            "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            os.path.join(d, "zoo.cfg")], stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def zk_modes(self):
        return {z: zk_mode(self.zk_host(z)) for z in ZK}

    def wait_quorum(self, seconds=90, members=ZK):
        def ok():
            modes = {z: zk_mode(self.zk_host(z)) for z in members}
            good = all(m in ("leader", "follower") for m in modes.values())
            leaders = sum(1 for m in modes.values() if m == "leader")
            return modes if good and leaders == 1 else None
        return poll_until(ok, seconds, "ZooKeeper quorum of %s" % ",".join(members), 0.2)

    def leader(self):
        for z, m in self.zk_modes().items():
            if m == "leader":
                return z
        return None

    # ---- replicas
    def start_replica(self, name):
        i = REPLICAS.index(name)
        out = open(os.path.join(self.work, "logs", name + ".log"), "a")
        self.replicas[name] = self.lab.popen(name, [
            self.args.turnstiled, "--listen", "%s:%d" % (self.lab.ip(name), REPLICA_PORT),
            "--zk", "%s:%d" % (self.zk_host(ZK[i]), ZK_PORT),
            "--zk-session-timeout", "%dms" % SESSION_MS, "--replica-id", name,
            "--drain-timeout", "2s", "--log-level", self.args.replica_log_level,
            "--metrics-listen", "127.0.0.1:9464"], stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def replica_addr(self, name):
        return "%s:%d" % (self.lab.ip(name), REPLICA_PORT)

    def health(self, name):
        """gRPC health of a replica, through the `turnstile health` CLI in a
        subprocess bounded by a timeout: the orchestrator itself never
        starts gRPC's threads (see netlab.PDEATHSIG for why threads and
        fork do not mix), and a probe that hangs cannot stall the run."""
        try:
            p = subprocess.run([self.args.cli, "--server", self.replica_addr(name),
                                "--rpc-timeout", "1s", "health"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=5)
        except subprocess.TimeoutExpired:
            return "ERROR: probe timed out"
        out = p.stdout.strip()
        return out if out else "ERROR: %s" % p.stderr.strip()[:200]

    def wait_serving(self, names=REPLICAS, seconds=60):
        def ok():
            for n in names:
                p = self.replicas.get(n)
                if p is not None and p.poll() is not None:
                    raise RuntimeError("replica %s exited with %s" % (n, p.returncode))
            return all(self.health(n) == "SERVING" for n in names)
        return poll_until(ok, seconds, "replicas %s SERVING" % ",".join(names), 0.2)

    def start_all(self):
        """The 3-node ensemble (quorum within 120 s), then every replica
        (SERVING within 60 s)."""
        for z in ZK:
            self.write_zk_config(z)
            self.start_zk(z)
        modes = self.wait_quorum(120)
        log("ZooKeeper ensemble up: %s" % modes)
        for r in REPLICAS:
            self.start_replica(r)
        self.wait_serving(REPLICAS, 60)
        log("replicas SERVING: %s" % ", ".join(self.replica_addr(r) for r in REPLICAS))

    # ---- clients
    def client_ids(self):
        """Short-hold clients c1..cN, then long-hold clients (one per replica)."""
        n = self.args.clients
        return ["c%d" % i for i in range(1, n + 1 + len(REPLICAS))]

    def start_client(self, cid):
        i = int(cid[1:])
        rep = REPLICAS[(i - 1) % len(REPLICAS)]
        self.client_replica[cid] = rep
        long_hold = i > self.args.clients
        # TTL leases for some (valid_for then counts down to the next
        # renewal), none for others (valid_for unbounded while HELD).
        ttl = 3000 if (i % 2 == 0) else 0
        if long_hold:
            locks, ops, gaps, wait = [LONG_LOCK], "40,100", "60,140", "15000"
        else:
            locks, ops, gaps, wait = SHORT_LOCKS, "2,4", "10,50", "3000"
        out = open(os.path.join(self.work, "logs", cid + ".log"), "a")
        self.clients[cid] = self.lab.popen("cl", [
            self.args.client, "--id", cid, "--target", self.replica_addr(rep), "--replica", rep,
            "--register-dir", os.path.join(self.work, "register"),
            "--history", os.path.join(self.work, "history", cid + ".jsonl"),
            "--locks", ",".join(locks), "--ttl-ms", str(ttl), "--wait-timeout-ms", wait,
            "--ops", ops, "--op-gap-ms", gaps, "--valid-margin-ms", "100",
            "--seed", str(self.args.seed * 100 + i)], stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def kill_client(self, cid):
        p = self.clients[cid]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            self.record("kill_client", client=cid, pid=p.pid)
            p.wait(10)

    def check_crashes(self):
        """Processes that exited without the nemesis killing them (between
        steps every fault has been healed, so none should be down): each is
        recorded as a crash (a violation) and started again."""
        crashed = []
        for group, start in ((self.zk, self.start_zk), (self.replicas, self.start_replica),
                             (self.clients, self.start_client)):
            for name, p in list(group.items()):
                if p.poll() is not None:
                    log("CRASH: %s (pid %d) exited with %s; restarting it" % (name, p.pid, p.returncode))
                    self.record("crash", name=name, pid=p.pid, returncode=p.returncode)
                    crashed.append(name)
                    start(name)
        return crashed

    def healthy(self):
        """Full quorum and every replica SERVING (checked, not waited)."""
        modes = self.zk_modes()
        if not all(m in ("leader", "follower") for m in modes.values()):
            return False
        return all(self.health(r) == "SERVING" for r in REPLICAS)


# ------------------------------------------------------------------ faults
class Fault:
    kind = "?"

    def __init__(self, c, rng, used):
        self.c, self.rng = c, rng
        self.targets = set()
        self.detail = {}
        self.hold_s = 1.0
        self.restarts_zk = []
        self.restarts_replica = []
        self.restarts_client = []

    def inject(self):
        raise NotImplementedError

    def heal(self):
        raise NotImplementedError

    def aim(self, used, min_remaining_s, ok=lambda r: True):
        """A replica for a replica-scoped fault: usually (TARGET_PROB) the
        replica of a long hold that plans to last min_remaining_s more, so
        the fault lands on a holder; else any free replica. Only the first
        fault of a step waits (up to 12 s) for such a hold."""
        free = [r for r in REPLICAS if r not in used and ok(r)]
        if not free:
            return None
        if self.rng.random() < TARGET_PROB:
            try:
                cid, g = poll_until(lambda: self.c.tracker.long_holder(min_remaining_s),
                                    0 if used else 12, "a long hold to aim at", 0.05)
                if g["replica"] in free:
                    self.detail["aimed_at"] = "%s (%s, token %s)" % (cid, g["hold"], g["token"])
                    return g["replica"]
            except TimeoutError:
                pass
        return self.rng.choice(free)


class ReplicaKill(Fault):
    kind = "replica-kill"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        self.hold_s = rng.uniform(0.5, 3.0)
        self.r = self.aim(used, 1.0)
        self.targets = {self.r}
        self.detail["replica"] = self.r

    def inject(self):
        p = self.c.replicas[self.r]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)

    def heal(self):
        self.c.start_replica(self.r)
        self.restarts_replica = [self.r]


class ZkKill(Fault):
    def __init__(self, c, rng, used, want):
        super().__init__(c, rng, used)
        modes = c.zk_modes()
        self.hold_s = rng.uniform(1.0, 6.0)
        self.z = None
        if want == "follower":
            # The ZooKeeper member of a holder's replica, when it is a follower.
            r = self.aim(used, 3.0, lambda r: modes.get(ZK[REPLICAS.index(r)]) == "follower"
                         and ZK[REPLICAS.index(r)] not in used)
            self.z = ZK[REPLICAS.index(r)] if r else None
        else:
            cand = [z for z in ZK if modes.get(z) == want and z not in used]
            self.z = rng.choice(cand) if cand else None
        self.targets = {self.z}
        self.detail.update(zk=self.z, mode=want)

    def inject(self):
        p = self.c.zk[self.z]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)

    def heal(self):
        self.c.start_zk(self.z)
        self.restarts_zk = [self.z]


class LeaderKill(ZkKill):
    kind = "leader-kill"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used, "leader")


class FollowerKill(ZkKill):
    kind = "follower-kill"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used, "follower")


class FollowerPartition(Fault):
    """A replica's ZooKeeper member (a follower) cut off from the rest of
    the ensemble; the replica stays connected to it. Held past syncLimit *
    tickTime so the follower gives up (after the leader expired the
    replica's session)."""
    kind = "follower-partition"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        modes = c.zk_modes()
        self.z = None
        if used & set(ZK):
            return
        self.hold_s = rng.uniform(SYNC_LIMIT * TICK_MS / 1000 + 1, SYNC_LIMIT * TICK_MS / 1000 + 4)
        self.r = self.aim(used, SESSION_MS / 1000 + 1,
                          lambda r: modes.get(ZK[REPLICAS.index(r)]) == "follower")
        if self.r is None:
            return
        self.z = ZK[REPLICAS.index(self.r)]
        self.targets = set(ZK) | {self.r}
        self.detail.update(zk=self.z, replica=self.r)

    def inject(self):
        self.c.lab.isolate(self.z, [z for z in ZK if z != self.z])

    def heal(self):
        for z in ZK:
            if z != self.z:
                self.c.lab.heal(self.z, z)


class ReplicaZkCut(Fault):
    kind = "replica-zk-cut"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        # Brief (the replica resumes) or past the session timeout (expiry).
        self.hold_s = rng.choice([rng.uniform(1.0, 2.5), rng.uniform(5.5, 8.0)])
        self.r = self.aim(used, min(self.hold_s, SESSION_MS / 1000 + 1),
                          lambda r: ZK[REPLICAS.index(r)] not in used)
        if self.r:
            self.z = ZK[REPLICAS.index(self.r)]
            self.targets = {self.r, self.z}
        self.detail["replica"] = self.r

    def inject(self):
        self.c.lab.cut(self.r, self.z)

    def heal(self):
        self.c.lab.heal(self.r, self.z)


class ReplicaPause(Fault):
    kind = "replica-pause"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        self.hold_s = rng.uniform(SESSION_MS / 1000 + 1.5, SESSION_MS / 1000 + 4)
        self.r = self.aim(used, SESSION_MS / 1000 + 1)
        self.targets = {self.r}
        self.detail["replica"] = self.r

    def inject(self):
        os.kill(self.c.replicas[self.r].pid, signal.SIGSTOP)

    def heal(self):
        os.kill(self.c.replicas[self.r].pid, signal.SIGCONT)


class EnsembleDown(Fault):
    def __init__(self, c, rng, used, lo, hi):
        super().__init__(c, rng, used)
        self.ok = not (used & set(ZK))
        self.targets = set(ZK)
        self.hold_s = rng.uniform(lo, hi)

    def inject(self):
        for z in ZK:
            p = self.c.zk[z]
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for z in ZK:
            self.c.zk[z].wait(10)

    def heal(self):
        for z in ZK:
            self.c.start_zk(z)
        self.restarts_zk = list(ZK)


class EnsembleDownBrief(EnsembleDown):
    kind = "ensemble-down-brief"

    def __init__(self, c, rng, used):
        # Down for well under the session timeout (the restart itself adds
        # a JVM start and an election).
        super().__init__(c, rng, used, 0.5, 1.5)


class EnsembleDownLong(EnsembleDown):
    kind = "ensemble-down-long"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used, SESSION_MS / 1000 + 1, SESSION_MS / 1000 + 3)


class ClientKill(Fault):
    kind = "client-kill"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        self.n = rng.choice([1, 1, 2])
        self.victims = []
        self.targets = {"clients"} if "clients" not in used else set()
        self.hold_s = rng.uniform(0.2, 1.0)

    def inject(self):
        # Wait (bounded) for clients that hold a lock right now.
        def holders():
            self.c.tracker.update()
            h = sorted(self.c.tracker.holding)
            return h if h else None
        try:
            h = poll_until(holders, 10, "a client holding a lock", 0.02)
        except TimeoutError:
            h = sorted(self.c.clients)
        self.victims = self.rng.sample(h, min(self.n, len(h)))
        self.detail = {"clients": self.victims, "holding": True}
        for cid in self.victims:
            self.c.kill_client(cid)

    def heal(self):
        for cid in self.victims:
            self.c.start_client(cid)


class LinkFault(Fault):
    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        self.hold_s = rng.uniform(3.0, 6.0)
        self.pair = None
        if rng.random() < 0.6:
            # The link between a (preferably holding) replica and its member.
            r = self.aim(used, 3.0, lambda r: ZK[REPLICAS.index(r)] not in used)
            if r:
                self.pair = (r, ZK[REPLICAS.index(r)])
        else:
            pairs = [(ZK[i], ZK[j]) for i in range(3) for j in range(i + 1, 3)]
            pairs = [p for p in pairs if not (set(p) & used)]
            self.pair = rng.choice(pairs) if pairs else None
        self.targets = set(self.pair) if self.pair else set()

    def heal(self):
        self.c.lab.heal(*self.pair)


class LinkDelay(LinkFault):
    kind = "link-delay"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        self.ms = rng.choice([rng.randint(50, 300), rng.randint(300, 1200)])
        self.detail.update(link=self.pair, delay_ms_each_way=self.ms)

    def inject(self):
        self.c.lab.delay(self.pair[0], self.pair[1], self.ms)


class LinkLoss(LinkFault):
    kind = "link-loss"

    def __init__(self, c, rng, used):
        super().__init__(c, rng, used)
        self.p = rng.uniform(0.1, 0.5)
        self.detail.update(link=self.pair, loss_each_way=round(self.p, 3))

    def inject(self):
        self.c.lab.lossy(self.pair[0], self.pair[1], self.p)


KINDS = {k.kind: k for k in [ReplicaKill, LeaderKill, FollowerKill, FollowerPartition,
                             ReplicaZkCut, ReplicaPause, EnsembleDownBrief, EnsembleDownLong,
                             ClientKill, LinkDelay, LinkLoss]}


def make_fault(kind, c, rng, used):
    f = KINDS[kind](c, rng, used)
    if isinstance(f, EnsembleDown):
        return f if f.ok else None
    if not f.targets or None in f.targets:
        return None
    return f


# ------------------------------------------------------------------ schedule
class Nemesis:
    def __init__(self, c, rng, kinds):
        self.c, self.rng, self.kinds = c, rng, kinds
        self.n = 0
        self.progress_fail = 0
        self.max_progress_s = 0.0

    def wait_ready(self, faults, seconds=120):
        zks = sorted({z for f in faults for z in f.restarts_zk})
        reps = sorted({r for f in faults for r in f.restarts_replica})
        if zks:
            self.c.wait_quorum(seconds)
        if reps:
            self.c.wait_serving(reps, seconds)

    def step(self, kinds):
        used = set()
        faults = []
        for k in kinds:
            f = make_fault(k, self.c, self.rng, used)
            if f is None:
                continue
            used |= f.targets
            faults.append(f)
        if not faults:
            return
        hold = max(f.hold_s for f in faults)
        ids = []
        for f in faults:
            self.n += 1
            f.id = "f%d" % self.n
            ids.append(f.id)
            f.inject()
            self.c.record("inject", fault=f.kind, id=f.id, detail=f.detail, hold_s=round(f.hold_s, 2))
        log("inject %s, hold %.1f s" % (
            " + ".join("%s %s %s" % (f.id, f.kind, json.dumps(f.detail)) for f in faults), hold))
        # Faults of one step may have different hold times: heal each at its own.
        start = time.monotonic()
        for f in sorted(faults, key=lambda f: f.hold_s):
            time.sleep(max(0.0, start + f.hold_s - time.monotonic()))  # timing the fault itself
            f.heal()
            f.heal_t = now()
            self.c.record("heal", fault=f.kind, id=f.id)
        heal_t = max(f.heal_t for f in faults)
        try:
            self.wait_ready(faults)
            self.c.record("ready", ids=ids)
        except TimeoutError as e:
            log("NOT READY after heal: %s" % e)
            self.c.record("not_ready", ids=ids, error=str(e))
        # Progress: a grant after the (last) heal.
        limit = (SESSION_MS + HEAL_SLACK_MS) / 1000 + 15
        try:
            poll_until(lambda: self.c.tracker.grant_after(heal_t), limit, "a grant after heal", 0.05)
            took = (self.c.tracker.last_grant_t - heal_t) / 1e9
            self.max_progress_s = max(self.max_progress_s, took)
            self.c.record("progress", ids=ids, first_grant_after_heal_s=round(took, 3))
            log("healed %s; grants so far %d" % (",".join(ids), self.c.tracker.grants))
        except TimeoutError:
            self.progress_fail += 1
            for f in faults:
                self.c.record("no_progress", fault=f.kind, id=f.id, waited_s=limit)
            log("NO PROGRESS within %.0f s after heal of %s" % (limit, ",".join(ids)))
        # Settle before the next fault: full quorum, every replica SERVING.
        self.c.check_crashes()
        try:
            poll_until(self.c.healthy, 60, "full quorum and all replicas SERVING", 0.2)
        except TimeoutError as e:
            log("not healthy before next fault: %s (zk %s)" % (e, self.c.zk_modes()))
            self.c.record("not_healthy", error=str(e))

    def run(self, duration):
        d = Deadline(duration)
        # Phase 1: each kind alone.
        for k in self.kinds:
            if d.expired():
                log("duration reached during the single-fault phase")
                return
            self.step([k])
        # Phase 2: random combinations (1..3 kinds, disjoint targets).
        while not d.expired():
            n = self.rng.choice([1, 2, 2, 3])
            self.step(self.rng.sample(self.kinds, min(n, len(self.kinds))))


# ------------------------------------------------------------------ main
class WatchdogExpired(BaseException):
    """Not an Exception: no `except TimeoutError/Exception` on the way up
    may swallow it."""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--turnstiled", required=True)
    ap.add_argument("--client", required=True, help="nemesis_client binary")
    ap.add_argument("--cli", required=True, help="turnstile CLI binary (health probes)")
    ap.add_argument("--delay-bin", default="", help="nemesis_delay binary (delayed links)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--duration", type=float, default=270, help="seconds of fault schedule")
    ap.add_argument("--only", default="", help="comma-separated fault kinds: " + ",".join(FAULTS))
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--work-dir", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work dir even on success")
    ap.add_argument("--replica-log-level", default="info")
    ap.add_argument("--watchdog", type=float, default=None,
                    help="seconds after which a stuck run prints every thread's stack and "
                         "fails (default: duration + 280, under ctest's 600 s)")
    args = ap.parse_args()

    why = netlab.cannot_run("run_nemesis", "sudo ctest -L nemesis")
    if why:
        print(why, file=sys.stderr)
        return 2
    for b in (args.turnstiled, args.client, args.cli):
        if not os.access(b, os.X_OK):
            print("run_nemesis: %s is not built" % b, file=sys.stderr)
            return 2
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little") % 1000000
    kinds = [k.strip() for k in args.only.split(",") if k.strip()] or list(FAULTS)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        print("run_nemesis: unknown fault(s) %s; known: %s" % (bad, ",".join(FAULTS)),
              file=sys.stderr)
        return 2
    if "link-delay" in kinds and not (args.delay_bin and os.access(args.delay_bin, os.X_OK)):
        print("run_nemesis: link-delay needs nemesis_delay (built when libnetfilter-queue-dev "
              "is installed; see deploy/debian-packages.txt)", file=sys.stderr)
        return 2

    netlab.install_signal_handlers()
    # Every wait here has its own deadline; this catches what none of them
    # does (a blocked system call): the stacks say where, and the lab is
    # still torn down (the exception unwinds through lab.close()).
    def watchdog(signum, frame):
        log("WATCHDOG: run_nemesis still running after %.0f s; stacks:" % watchdog_s)
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        raise WatchdogExpired("run_nemesis watchdog after %.0f s" % watchdog_s)
    watchdog_s = args.watchdog if args.watchdog else args.duration + 280
    signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(int(watchdog_s))
    netlab.sweep_stale(log)
    if args.work_dir and os.path.isdir(args.work_dir) and os.listdir(args.work_dir):
        print("run_nemesis: --work-dir %s is not empty" % args.work_dir, file=sys.stderr)
        return 2
    work = args.work_dir or tempfile.mkdtemp(prefix="nemesis-")
    os.makedirs(work, exist_ok=True)
    print("run_nemesis: seed %d (rerun with --seed %d), duration %.0f s, work dir %s" % (
        args.seed, args.seed, args.duration, work), flush=True)
    rng = random.Random(args.seed)

    lab = netlab.Lab(NODES, subnet=SUBNET, delay_bin=args.delay_bin or None, log=log)
    ok = False
    try:
        lab.up()
        if "link-loss" in kinds and not lab.has_statistic_match():
            print("run_nemesis: NOTICE: iptables statistic match (xt_statistic) unavailable: "
                  "link-loss faults are not injected", flush=True)
            kinds.remove("link-loss")
        # The orchestrator's own probes (ruok/srvr, gRPC health, kazoo) go
        # from the client namespace; every process is started with `ip
        # netns exec` into its own.
        netlab.setns(lab.ns("cl"))
        c = Cluster(lab, work, args)
        meta = {"t0": T0, "seed": args.seed, "session_timeout_ms": SESSION_MS,
                "heal_slack_ms": HEAL_SLACK_MS, "tick_ms": TICK_MS, "sync_limit": SYNC_LIMIT,
                "init_limit": INIT_LIMIT, "locks": LOCKS, "clients": args.clients,
                "kinds": kinds, "duration_s": args.duration}
        with open(os.path.join(work, "meta.json"), "w") as f:
            json.dump(meta, f)

        c.start_all()
        for cid in c.client_ids():
            c.start_client(cid)
        poll_until(lambda: (c.tracker.update() or c.tracker.grants >= args.clients), 60,
                   "first grants", 0.1)
        log("workload running: %d short-hold clients on %s, %d long-hold clients on %s" % (
            args.clients, ",".join(SHORT_LOCKS), len(REPLICAS), LONG_LOCK))

        nem = Nemesis(c, rng, kinds)
        nem.run(args.duration)

        # ---- wind down
        lab.heal_all()
        c.check_crashes()
        for r in REPLICAS:
            os.kill(c.replicas[r].pid, signal.SIGCONT)
        try:
            poll_until(c.healthy, 90, "full quorum and all replicas SERVING at the end", 0.2)
        except TimeoutError as e:
            log("end: %s (zk %s)" % (e, c.zk_modes()))
        c.record("heal", fault="final", id="final", final=True)
        for cid, p in c.clients.items():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for cid, p in c.clients.items():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                log("client %s did not stop in 20 s: SIGKILL" % cid)
                c.kill_client(cid)
        c.tracker.update()
        log("clients stopped; %d grants" % c.tracker.grants)
        final = {"health": {r: c.health(r) for r in REPLICAS}}
        hosts = ",".join("%s:%d" % (c.zk_host(z), ZK_PORT) for z in ZK)
        try:
            # Deletions after a client's stream ends are asynchronous: allow
            # a moment (bounded) for the last ones.
            last = [None]

            def no_orphans():
                last[0] = check_history.zk_contender_nodes(hosts)
                return not last[0]
            try:
                poll_until(no_orphans, 5, "contender nodes to be gone", 0.25)
            except TimeoutError:
                pass
            final["orphans"] = last[0]
        except Exception as e:  # noqa: BLE001 - reported as a probe failure
            final["orphans"] = None
            final["orphans_error"] = repr(e)
        final["zk_modes"] = c.zk_modes()
        with open(os.path.join(work, "final.json"), "w") as f:
            json.dump(final, f)
        log("end probes: %s" % json.dumps(final))

        print("run_nemesis: seed %d, %d fault steps, %d grants, max first-grant-after-heal "
              "%.2f s" % (args.seed, nem.n, c.tracker.grants, nem.max_progress_s), flush=True)
        viols, stats = check_history.report(check_history.Run(work))
        ok = not viols
        print("run_nemesis: %s (seed %d, work dir %s)" % (
            "PASS" if ok else "FAIL", args.seed, work), flush=True)
    finally:
        lab.close()
        if ok and not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
