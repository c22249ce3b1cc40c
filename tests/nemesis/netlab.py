"""Network lab of the partition fault suite: network namespaces on one bridge.

One namespace per node (e.g. zk1..zk3, r1..r3, cl), each with a veth "eth0"
whose peer sits on a Linux bridge in a hub namespace of its own, private
addresses (10.77.0.x/24, only inside these namespaces). The root namespace's
interfaces are never touched: every link is created inside the hub namespace
with its peer moved straight into the node's namespace.

Names carry a per-run prefix "tsn<pid>-" (pid of the process that made them).
Lab.sweep_stale() deletes namespaces of that pattern whose creating process
is gone (after killing, by pid, any process still inside them: those were
started by an earlier run of this suite). Lab.close() is idempotent and
registered with atexit; install_signal_handlers() turns SIGTERM/SIGINT/SIGHUP
into a clean exit. Processes are started through `setpriv --pdeathsig KILL`,
so they die with the orchestrator even if it is SIGKILLed.

Fault primitives (iptables-legacy rules inside the namespaces, in chains
NEMESIS-IN / NEMESIS-OUT jumped to from INPUT / OUTPUT):
  cut(a, b)             drop everything between a and b (both directions)
  isolate(a, others)    cut(a, o) for each o
  lossy(a, b, p)        drop each packet between a and b with probability p
                        (xt_statistic), each direction
  delay(a, b, ms)       hold each packet between a and b for ms (each
                        direction) in user space: NFQUEUE + nemesis_delay
                        (this kernel has no tc netem)
  heal(a, b) / heal_all()
Run as root.
"""

import atexit
import ctypes
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

NETNS_DIR = "/var/run/netns"
PREFIX_RE = re.compile(r"^tsn(\d+)-")
IPTABLES = "iptables-legacy"
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


# Every child gets SIGKILL when the orchestrator dies. util-linux's setpriv
# (Essential in Debian) sets the parent-death signal and execs the command,
# so the pid stays the command's. Not a preexec_fn: Python code between fork
# and exec can deadlock in the child when other threads (gRPC's, for the
# health probes) hold a lock at fork time, and Popen then waits for the exec
# forever. A CI run hung exactly there, so no Python runs in a child.
PDEATHSIG = ["setpriv", "--pdeathsig", "KILL", "--"]


def cannot_run(prog, hint):
    """Why `prog` cannot build a lab here (not root, a tool missing), or None.
    `hint` says how to run it as root (e.g. "sudo ctest -L nemesis")."""
    if os.geteuid() != 0:
        return ("%s: must run as root (network namespaces, iptables); CI runs as root. "
                "Run: %s" % (prog, hint))
    for tool in ("ip", IPTABLES, "java", "setpriv"):
        if shutil.which(tool) is None:
            return "%s: %s not found (see deploy/debian-packages.txt)" % (prog, tool)
    return None


def run(argv, check=True, timeout=30):
    """Runs a command, returns stdout. Raises with stderr on failure."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), p.returncode,
                                                p.stderr.strip()))
    return p.stdout


def pid_alive(pid):
    """Whether pid runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] != "Z"


def list_netns():
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(ns):
    out = run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in out.split() if x.isdigit()]


def kill_pids_in_netns(ns):
    """SIGKILLs every process inside namespace ns (by pid), waits for them."""
    # Never this process itself: the orchestrator moves into the client
    # namespace for its probes (setns), and then is listed there too.
    pids = [p for p in netns_pids(ns) if p != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return pids


def sweep_stale(log=print):
    """Deletes namespaces named tsn<pid>-* whose creator pid is dead."""
    removed = []
    for ns in list_netns():
        m = PREFIX_RE.match(ns)
        if not m:
            continue
        creator = int(m.group(1))
        if creator != os.getpid() and pid_alive(creator):
            continue
        if creator == os.getpid():
            continue
        killed = kill_pids_in_netns(ns)
        run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
        log("netlab: removed stale namespace %s (creator pid %d gone; killed %s)"
            % (ns, creator, killed or "no processes"))
    return removed


def setns(ns):
    """Moves the CALLING THREAD into namespace ns (threads it creates later
    inherit it). Call from the main thread before any other thread exists."""
    fd = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns(%s): %s" % (ns, os.strerror(e)))
    finally:
        os.close(fd)


class Lab:
    def __init__(self, nodes, subnet="10.77.0", delay_bin=None, log=print):
        """nodes: list of (name, host number) e.g. [("zk1", 11), ...]."""
        self.pid = os.getpid()
        self.prefix = "tsn%d-" % self.pid
        self.subnet = subnet
        self.nodes = dict(nodes)
        self.hub = self.prefix + "hub"
        self.delay_bin = delay_bin
        self.log = log
        self.procs = []  # every Popen started through the lab
        self.rules = {}  # (a, b) -> list of (node, chain, rule argv)
        self.delayers = {}  # (a, b) -> list of Popen
        self.next_queue = 1
        self.created = []
        self.closed = False
        atexit.register(self.close)

    # ---- topology
    def ns(self, node):
        return self.prefix + node

    def ip(self, node):
        return "%s.%d" % (self.subnet, self.nodes[node])

    def up(self):
        self._add_ns(self.hub)
        run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", self.hub, "link", "set", "br0", "up"])
        run(["ip", "-n", self.hub, "link", "set", "lo", "up"])
        for node in self.nodes:
            ns = self.ns(node)
            self._add_ns(ns)
            port = "v-" + node
            run(["ip", "-n", self.hub, "link", "add", port, "type", "veth",
                 "peer", "name", "eth0", "netns", ns])
            run(["ip", "-n", self.hub, "link", "set", port, "master", "br0"])
            run(["ip", "-n", self.hub, "link", "set", port, "up"])
            run(["ip", "-n", ns, "addr", "add", self.ip(node) + "/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            for chain, parent in (("NEMESIS-IN", "INPUT"), ("NEMESIS-OUT", "OUTPUT")):
                self._ipt(node, ["-N", chain])
                self._ipt(node, ["-I", parent, "1", "-j", chain])

    def _add_ns(self, ns):
        run(["ip", "netns", "add", ns])
        self.created.append(ns)

    def _ipt(self, node, args):
        return run(["ip", "netns", "exec", self.ns(node), IPTABLES, "-w"] + args)

    # ---- processes
    def popen(self, node, argv, stdout=None, stderr=None, env=None):
        """Starts argv inside node's namespace. `ip netns exec` execs the
        command itself, so the returned Popen's pid is the command's pid."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(node)] + PDEATHSIG + list(argv),
                             stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                             env=env, start_new_session=True)
        self.procs.append(p)
        return p

    @staticmethod
    def stop(p, timeout=10.0, sig=signal.SIGTERM):
        """Stops one process by pid: sig, wait up to timeout, then SIGKILL."""
        if p is None or p.poll() is not None:
            return
        try:
            os.kill(p.pid, signal.SIGCONT)
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)

    # ---- faults
    def _add_rule(self, key, node, chain, rule):
        self._ipt(node, ["-A", chain] + rule)
        self.rules.setdefault(key, []).append((node, chain, rule))

    def cut(self, a, b):
        key = (a, b)
        self._add_rule(key, a, "NEMESIS-IN", ["-s", self.ip(b), "-j", "DROP"])
        self._add_rule(key, a, "NEMESIS-OUT", ["-d", self.ip(b), "-j", "DROP"])
        self._add_rule(key, b, "NEMESIS-IN", ["-s", self.ip(a), "-j", "DROP"])
        self._add_rule(key, b, "NEMESIS-OUT", ["-d", self.ip(a), "-j", "DROP"])

    def isolate(self, a, others):
        for o in others:
            if o != a:
                self.cut(a, o)

    def lossy(self, a, b, p):
        key = (a, b)
        stat = ["-m", "statistic", "--mode", "random", "--probability", "%.3f" % p, "-j", "DROP"]
        self._add_rule(key, a, "NEMESIS-IN", ["-s", self.ip(b)] + stat)
        self._add_rule(key, b, "NEMESIS-IN", ["-s", self.ip(a)] + stat)

    def delay(self, a, b, ms):
        if not self.delay_bin:
            raise RuntimeError("delay: nemesis_delay was not built (libnetfilter-queue-dev missing?)")
        key = (a, b)
        for src, dst in ((a, b), (b, a)):
            q = self.next_queue
            self.next_queue += 1
            out = open(os.devnull, "w")
            p = subprocess.Popen(["ip", "netns", "exec", self.ns(src)] + PDEATHSIG + [self.delay_bin,
                                  "--queue", str(q), "--delay-ms", str(int(ms))],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=out,
                                 text=True, start_new_session=True)
            out.close()
            self.procs.append(p)
            self.delayers.setdefault(key, []).append(p)
            # "ready" once bound (EOF if it died); 10 s at most.
            line = ""
            if select.select([p.stdout], [], [], 10)[0]:
                line = p.stdout.readline()
            if line.strip() != "ready":
                self.stop(p)
                raise RuntimeError("nemesis_delay in %s did not start (exit %s)" % (src, p.poll()))
            self._add_rule(key, src, "NEMESIS-OUT",
                           ["-d", self.ip(dst), "-j", "NFQUEUE", "--queue-num", str(q),
                            "--queue-bypass"])

    def heal(self, a, b):
        for key in ((a, b), (b, a)):
            for node, chain, rule in reversed(self.rules.pop(key, [])):
                self._ipt(node, ["-D", chain] + rule)
            for p in self.delayers.pop(key, []):
                self.stop(p)

    def heal_all(self):
        for key in list(self.rules):
            self.heal(*key)
        for key in list(self.delayers):
            self.heal(*key)

    def has_statistic_match(self):
        """Whether iptables' statistic match (xt_statistic) works here: a
        rule using it is added to and removed from the hub namespace."""
        rule = ["-A", "INPUT", "-m", "statistic", "--mode", "random", "--probability",
                "0.5", "-j", "ACCEPT"]
        try:
            run(["ip", "netns", "exec", self.hub, IPTABLES, "-w"] + rule)
        except RuntimeError:
            return False
        run(["ip", "netns", "exec", self.hub, IPTABLES, "-w", "-D"] + rule[1:])
        return True

    def rule_counts(self):
        """node -> rule lines in NEMESIS chains (for checks/debugging)."""
        out = {}
        for node in self.nodes:
            s = self._ipt(node, ["-S"])
            out[node] = [l for l in s.splitlines() if l.startswith("-A NEMESIS")]
        return out

    # ---- teardown
    def close(self):
        if self.closed or os.getpid() != self.pid:
            return
        self.closed = True
        # All at once: SIGCONT+SIGTERM to every live process, up to 5 s in
        # all, then SIGKILL to what is left.
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.05)
        for p in live:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    self.log("netlab: pid %d did not die" % p.pid)
        for ns in reversed(self.created):
            # Anything still inside was started by us (e.g. a grandchild).
            kill_pids_in_netns(ns)
            run(["ip", "netns", "del", ns], check=False)
        left = [ns for ns in list_netns() if ns.startswith(self.prefix)]
        if left:
            self.log("netlab: namespaces still present after close: %s" % left)


def install_signal_handlers():
    """SIGTERM/SIGINT/SIGHUP -> SystemExit, so atexit handlers run."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)


if __name__ == "__main__":
    # Self-check: python3 netlab.py [sweep]
    if os.geteuid() != 0:
        sys.exit("netlab: must run as root")
    sweep_stale()
    if sys.argv[1:] == ["sweep"]:
        sys.exit(0)
    install_signal_handlers()
    lab = Lab([("a", 1), ("b", 2), ("c", 3)], subnet="10.77.0")
    lab.up()
    print("statistic match:", lab.has_statistic_match())
    print(lab.rule_counts())
    lab.cut("a", "b")
    lab.lossy("a", "c", 0.3)
    print(lab.rule_counts())
    lab.heal_all()
    print(lab.rule_counts())
    lab.close()
    print("ok")
