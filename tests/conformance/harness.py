#!/usr/bin/python3
"""The cross-language conformance harness (issue 22).

One scenario of tests/conformance/scenarios.json, for one language's client
library (or several: "mixed"), against a real ZooKeeper and real turnstiled
replicas that this harness starts on loopback (free ports, a temp dir) and
stops by PID:

    harness.py --build BUILD_DIR --lang cpp|python|python_aio|node|java|go|mixed SCENARIO

Exit status 0 when every expectation of the scenario held, 1 otherwise (the
first failure is printed), 2 on usage errors. Every wait has a deadline;
nothing is done by sleeping except a scenario's own "hold_ms" (an interval
in which nothing may go wrong, such as a TTL lease being kept alive).

Each client of a scenario is one runner process of its language: a small
program that drives that language's library and speaks JSON lines on
stdin/stdout (the protocol is in tests/conformance/README.md). The harness
sends commands and reads events; the scenario says what must be seen.
"""
import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DEFAULT_WITHIN_MS = 20000
ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/*"


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter(port, word, timeout=2.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    return out.decode(errors="replace")
                out += b
    except OSError:
        return ""


class ZooKeeper:
    """A standalone ZooKeeper (Debian's) on a free loopback port."""

    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "zk")
        os.makedirs(self.dir)
        self.port = free_port()
        cfg = os.path.join(self.dir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\n"
                    "clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nforceSync=no\n"
                    "4lw.commands.whitelist=*\nadmin.enableServer=false\n"
                    "minSessionTimeout=1000\n" % (self.dir, self.port))
        self.log = open(os.path.join(self.dir, "zk.log"), "w")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + self.dir, "-cp", ZK_CLASSPATH,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while four_letter(self.port, "ruok") != "imok":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Failure("ZooKeeper did not start (see %s)" % self.log.name)
            time.sleep(0.1)  # polling a server that is starting: no event to wait on

    @property
    def connect(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def make_pki(tmp, clients):
    """A CA, a server certificate for 127.0.0.1 and one client certificate
    per client (URI SAN spiffe://conformance/NAME, clientAuth), made with
    the openssl command; returns the paths."""
    d = os.path.join(tmp, "pki")
    os.makedirs(d)

    def run(*args, stdin=None):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, input=stdin, text=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=turnstile-conformance-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def leaf(name, cn, ext):
        run("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        run("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext")
        return os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")

    pki = {"ca": os.path.join(d, "ca.crt")}
    pki["server"] = leaf("server", "localhost",
                         "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    for c in clients:
        pki[c] = leaf("client-" + c, c, "subjectAltName=URI:spiffe://conformance/%s\n"
                      "extendedKeyUsage=clientAuth\n" % c)
    return pki


class Replica:
    """One turnstiled process, SERVING when the constructor returns.

    turnstiled prints "listening on ADDR" as soon as its port is bound, but
    answers UNAVAILABLE until its ZooKeeper sessions connect: listening is
    not serving. So the constructor waits (with a deadline) until the health
    check says SERVING, through `turnstile health` run with `health_env`
    (default: this process's environment; a TLS replica needs the
    TURNSTILE_TLS_* variables of a client it accepts). wait=False starts it
    only, for a caller that starts several and then calls wait_serving on
    each before its first use."""

    def __init__(self, build, zk, root, index, extra=(), health_env=None, wait=True):
        self.index = index
        self.zk_connect, self.zk_root = zk.connect, root  # where its locks' nodes live
        extra = list(extra)
        if wait and health_env is None and "--tls-cert-file" in extra:
            raise Failure("replica %d uses TLS: give health_env (TURNSTILE_TLS_* of a client "
                          "it accepts) so that its health can be checked" % index)
        argv = [os.path.join(build, "server", "turnstiled"), "--listen", "127.0.0.1:0",
                "--zk", zk.connect, "--zk-root", root, "--metrics-listen", "",
                "--zk-session-timeout", "4s", "--drain-timeout", "2s",
                "--replica-id", "r%d" % index, "--log-level", "error",
                "--check-invariants"] + extra
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None, text=True,
                                     start_new_session=True)
        # Its stdout is drained by a thread (so that it never blocks on a
        # full pipe), which hands over the first line.
        first = queue.Queue()
        threading.Thread(target=self._drain, args=(first,), daemon=True).start()
        try:
            line = first.get(timeout=30)  # "turnstiled V listening on ADDR (...)"
        except queue.Empty:
            self.stop()
            raise Failure("replica %d printed no address within 30 s" % index)
        words = line.split()
        if "listening" not in words:
            self.stop()
            raise Failure("turnstiled printed %r, not its address" % line)
        self.address = words[words.index("on") + 1]
        if wait:
            self.wait_serving(build, dict(os.environ) if health_env is None else health_env)

    def _drain(self, first):
        for line in self.proc.stdout:
            if first is not None:
                first.put(line)
                first = None
        if first is not None:
            first.put("")  # it exited without a line

    def wait_serving(self, build, env, within_s=30):
        """Until its health check says SERVING (its ZooKeeper session is up):
        `turnstile health` exits 0 only then."""
        cli = os.path.join(build, "client", "turnstile")
        deadline = time.monotonic() + within_s
        while True:
            r = subprocess.run([cli, "--server", self.address, "--rpc-timeout", "2s", "health"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode == 0:
                return
            if self.proc.poll() is not None:
                raise Failure("replica %d at %s exited (%s) before SERVING"
                              % (self.index, self.address, self.proc.returncode))
            if time.monotonic() > deadline:
                raise Failure("replica %d at %s is not SERVING within %d s"
                              % (self.index, self.address, within_s))
            time.sleep(0.05)  # polling the health check: there is no event to wait on

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def live_replicas(build, tag, count=2, more=(), extra=None):
    """A ZooKeeper and `count` SERVING replicas on a root of their own, for
    a library's live tests (go_live_test.py, node_live_test.py); yields
    (replicas, a two-address target whose first address is dead and whose
    second is replica count-1), and stops everything after. extra:
    {replica index: [more turnstiled flags]} for the first `count`; `more`
    are the flags of further replicas, started after those (e.g. a lower
    --max-wait-timeout)."""
    tmp = tempfile.mkdtemp(prefix="turnstile-%s-" % tag)
    zk, replicas = None, []
    try:
        zk = ZooKeeper(tmp)
        root = "/%s-%d" % (tag, os.getpid())
        # Started together, then each waited for: none is used before SERVING.
        for i in range(count):
            replicas.append(Replica(build, zk, root, i, (extra or {}).get(i, ()), wait=False))
        for j, flags in enumerate(more):
            replicas.append(Replica(build, zk, root, count + j, flags, wait=False))
        for r in replicas:
            r.wait_serving(build, dict(os.environ))
        dead = "127.0.0.1:%d" % free_port()  # nothing listens there
        yield replicas, "ipv4:%s,%s" % (dead, replicas[count - 1].address)
    finally:
        for r in replicas:
            r.stop()
        if zk is not None:
            zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def runner_argv(lang, build):
    """The command line of one client runner of `lang`."""
    if lang == "cpp":
        return [os.path.join(build, "tests", "conformance_runner_cpp")]
    if lang == "python":
        return ["/usr/bin/python3", os.path.join(HERE, "runner.py")]
    if lang == "python_aio":  # the asyncio library, turnstile.aio
        return ["/usr/bin/python3", os.path.join(HERE, "runner_aio.py")]
    if lang == "node":
        return [shutil.which("node") or "/usr/bin/node", os.path.join(HERE, "runner_node.js")]
    if lang == "java":
        # client/java/build.sh writes BUILD/java (classes + classpath.txt);
        # TURNSTILE_JAVA_CLASSES names another build of it (e.g. a worktree's).
        out = os.environ.get("TURNSTILE_JAVA_CLASSES") or os.path.join(build, "java")
        with open(os.path.join(out, "classpath.txt")) as f:
            jars = f.read().strip()
        return ["java", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-cp", os.path.join(out, "classes") + ":" + jars,
                "io.turnstile.conformance.Runner"]
    if lang == "go":  # built by client/go/build.sh (CMake target turnstile_go)
        path = (os.environ.get("TURNSTILE_GO_RUNNER")
                or os.path.join(build, "go", "bin", "conformance-runner"))
        if not os.access(path, os.X_OK):
            raise Failure("no Go runner at %s: build the CMake target turnstile_go "
                          "(client/go/build.sh BUILD/go) or set TURNSTILE_GO_RUNNER" % path)
        return [path]
    if lang == "broken":  # the harness's own test (broken_runner.py)
        return ["/usr/bin/python3", os.path.join(HERE, "broken_runner.py")]
    raise Failure("no runner for language %r" % lang)


def runner_env(lang, build):
    env = dict(os.environ)
    if lang in ("python", "python_aio"):
        # The package `turnstile` as the CMake build assembles it.
        env["PYTHONPATH"] = os.path.join(build, "python")
    if lang == "node":
        env["NODE_PATH"] = os.path.join(TOP, "client", "node", "node_modules")
    return env


class Client:
    """One runner process: commands in, events out (JSON lines)."""

    def __init__(self, name, lang, build, target, events, tls=None):
        self.name, self.lang = name, lang
        env = runner_env(lang, build)
        if tls is not None:  # mutual TLS: the same variables as the CLI's
            env["TURNSTILE_TLS_CA_FILE"] = tls["ca"]
            env["TURNSTILE_TLS_CERT_FILE"], env["TURNSTILE_TLS_KEY_FILE"] = tls[name]
        self.proc = subprocess.Popen(runner_argv(lang, build) + ["--server", target,
                                                                 "--owner", name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=None, text=True, env=env,
                                     start_new_session=True)
        self._events = events
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "garbage", "line": line}
            ev["client"] = self.name
            self._events.put(ev)
        self._events.put({"client": self.name, "event": "exited"})

    def send(self, cmd):
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise Failure("client %s (%s) is gone" % (self.name, self.lang))

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.wait(10)
            except (Failure, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class Scenario:
    """Runs one scenario: the replicas, the clients, the steps."""

    def __init__(self, spec, langs, build):
        self.spec, self.langs, self.build = spec, langs, build
        self.events = queue.Queue()
        self.seen = []            # every event, in arrival order
        self.holds = {}           # hold -> {"client", "lock", "token", "lease", "released_sent"}
        self.register = {}        # lock -> highest fencing token accepted (fenced locks)
        self.fenced = set(spec.get("fenced", []))
        self.exclusive = {}       # fenced lock -> holds currently granted and not released
        self.replies = {}         # req -> reply
        self.req = 0
        self.targets = {}         # client -> its gRPC target
        self.cli_env = None       # environment of `turnstile` calls (TLS files)

    # -- events ------------------------------------------------------------
    def _take(self, timeout):
        ev = self.events.get(timeout=timeout)
        self.seen.append(ev)
        self._check(ev)
        if "req" in ev:
            self.replies[ev["req"]] = ev
        return ev

    def _check(self, ev):
        """Checks that hold for every event: the fenced register and
        exclusion on fenced locks."""
        if ev.get("event") == "garbage":
            raise Failure("client %s wrote %r" % (ev["client"], ev["line"]))
        hold = self.holds.get(ev.get("hold"))
        if hold is None:
            return
        if ev.get("event") == "acquired":
            hold["token"], hold["lease"] = int(ev["token"]), ev.get("lease_id", "")
            lock = hold["lock"]
            if lock in self.fenced:
                if hold["token"] <= self.register.get(lock, 0):
                    raise Failure("the fenced register of %s rejects %s's token %d (it has %d)"
                                  % (lock, ev["hold"], hold["token"], self.register[lock]))
                self.register[lock] = hold["token"]
                if hold["kind"] == "exclusive":
                    others = [h for h in self.exclusive.get(lock, set())
                              if not self.holds[h]["released_sent"]]
                    if others:
                        raise Failure("%s granted %s while %s still held it"
                                      % (ev["hold"], lock, others))
                self.exclusive.setdefault(lock, set()).add(ev["hold"])
        elif ev.get("event") in ("released", "lost"):
            self.exclusive.get(hold["lock"], set()).discard(ev["hold"])

    def await_event(self, match, within_ms, what):
        """Waits for an event (already seen and not yet consumed, or new)
        for which match(ev) is true."""
        deadline = time.monotonic() + within_ms / 1000.0
        for ev in self.seen:
            if not ev.get("_used") and match(ev):
                ev["_used"] = True
                return ev
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("no %s within %d ms; last events: %s"
                              % (what, within_ms, json.dumps(self.seen[-8:])))
            try:
                ev = self._take(left)
            except queue.Empty:
                continue
            if match(ev):
                ev["_used"] = True
                return ev

    def drain_events(self):
        while True:
            try:
                self._take(0)
            except queue.Empty:
                return

    # -- steps ---------------------------------------------------------------
    def run(self):
        tmp = tempfile.mkdtemp(prefix="turnstile-conformance-")
        self.zk = None
        self.replicas, self.clients = [], {}
        try:
            self.zk = ZooKeeper(tmp)
            root = "/conformance-%d" % os.getpid()
            names = sorted(self.spec["clients"])
            tls, extra = None, []
            if self.spec.get("mutual_tls"):
                tls = make_pki(tmp, names)
                extra = ["--tls-cert-file", tls["server"][0], "--tls-key-file", tls["server"][1],
                         "--tls-client-ca-file", tls["ca"]]
            if "policy" in self.spec:  # an authorization policy (authz.proto's JSON)
                if tls is None:
                    raise Failure("a policy needs mutual_tls (identities come from certificates)")
                policy = os.path.join(tmp, "policy.json")
                with open(policy, "w") as f:
                    json.dump(self.spec["policy"], f)
                extra += ["--authz-file", policy]
            for i in range(self.spec.get("replicas", 1)):
                self.replicas.append(Replica(self.build, self.zk, root, i, extra, wait=False))
            health_env = dict(os.environ)
            if tls is not None:
                health_env["TURNSTILE_TLS_CA_FILE"] = tls["ca"]
                health_env["TURNSTILE_TLS_CERT_FILE"], health_env["TURNSTILE_TLS_KEY_FILE"] = \
                    tls[names[0]]
            for r in self.replicas:
                r.wait_serving(self.build, health_env)
            self.cli_env = health_env  # the CLI's own calls (a waiter's token)
            for i, name in enumerate(names):
                c = self.spec["clients"][name]
                lang = c.get("lang") or self.langs[i % len(self.langs)]
                reps = c.get("replicas", [0])
                addrs = [self.replicas[r].address for r in reps]
                target = addrs[0] if len(addrs) == 1 else "ipv4:" + ",".join(addrs)
                self.clients[name] = Client(name, lang, self.build, target, self.events, tls)
                self.targets[name] = target
            for name in names:
                self.await_event(lambda e, n=name: e["client"] == n and e.get("event") == "ready",
                                 30000, "ready from client %s" % name)
            for i, step in enumerate(self.spec["steps"]):
                try:
                    self.step(step)
                except Failure as f:
                    raise Failure("step %d %s: %s" % (i + 1, json.dumps(step), f))
            self.drain_events()
        finally:
            for c in self.clients.values():
                c.stop()
            for r in self.replicas:
                r.stop()
            if self.zk is not None:
                self.zk.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    def _lang(self, client):
        return self.clients[client].lang

    def step(self, s):
        within = s.get("within_ms", DEFAULT_WITHIN_MS)
        if "fault" in s:
            return self.fault(s)
        if "hold_ms" in s:  # an interval in which nothing may go wrong
            end = time.monotonic() + s["hold_ms"] / 1000.0
            while time.monotonic() < end:
                try:
                    self._take(max(end - time.monotonic(), 0.001))
                except queue.Empty:
                    pass
            for ev in self.seen:
                if ev.get("event") in ("lost", "suspended") and not ev.get("_used") \
                        and ev.get("hold") in s.get("holds", []):
                    raise Failure("%s was %s during hold_ms" % (ev["hold"], ev["event"]))
            return
        if "contend" in s:
            return self.contend(s["contend"], within)
        if "await" in s:
            a = s["await"]
            ev = self.expect_hold(a["hold"], a, within)
            if "after" in a:
                mine = self.seen.index(ev)
                theirs = [i for i, e in enumerate(self.seen)
                          if e.get("hold") == a["after"] and e.get("_used")]
                if not theirs or theirs[-1] > mine:
                    raise Failure("%s's %s came before %s's awaited event"
                                  % (a["hold"], ev["event"], a["after"]))
            return
        do = s["do"]
        client = self.clients[s["client"]]
        if do == "acquire":
            hold = s["hold"]
            cmd = {"cmd": "acquire", "hold": hold, "lock": s["lock"],
                   "wait_ms": s.get("wait_ms", 10000), "owner": s["client"]}
            for key in ("ttl_ms", "kind", "max_holders", "lock_delay_ms", "revoke_holders",
                        "revoke_reason", "metadata"):
                if key in s:
                    cmd[key] = s[key]
            self.holds[hold] = {"client": s["client"], "lock": s["lock"], "token": None,
                                "lease": None, "released_sent": False,
                                "kind": s.get("kind", "exclusive")}
            client.send(cmd)
        elif do == "release":
            self.holds[s["hold"]]["released_sent"] = True
            client.send({"cmd": "release", "hold": s["hold"]})
        elif do in ("describe", "revoke", "list", "check"):
            self.req += 1
            req = "r%d" % self.req
            cmd = {"cmd": do, "req": req}
            if do == "describe":
                cmd["lock"] = s["lock"]
            elif do == "check":
                cmd["lock"] = s["lock"]
                cmd["token"] = s["token"] if "token" in s else self.token_of(s["token_of"], s)
                cmd["stale"] = bool(s.get("stale", False))
            elif do == "list":
                cmd["prefix"] = s.get("prefix", "")
            else:
                cmd["lease_id"] = self.holds[s["of"]]["lease"]
                cmd["reason"] = s.get("reason", "")
            client.send(cmd)
            reply = self.await_event(lambda e: e.get("req") == req, within, "reply to " + do)
            if do == "check":
                self.expect_check(reply, s)
            else:
                self.expect_reply(reply, s.get("expect", {}))
            return
        else:
            raise Failure("unknown step %r" % do)
        if "expect" in s:
            self.expect_hold(s.get("hold"), s["expect"], within)

    def expect_hold(self, hold, expect, within):
        if isinstance(expect, str):
            expect = {"event": expect}
        hold = expect.get("hold", hold)
        want = expect.get("event", "error" if "error" in expect else None)
        if want == "suspended_or_lost":
            match_types = ("suspended", "lost")
        else:
            match_types = (want,)
        ev = self.await_event(
            lambda e: e.get("hold") == hold and e.get("event") in match_types + (
                ("error",) if want != "error" else ()),
            within, "%s of %s" % (want, hold))
        if ev["event"] == "error" and want != "error":
            raise Failure("%s ended with %s: %s" % (hold, ev.get("code"), ev.get("message")))
        if "error" in expect and ev.get("code") != expect["error"]:
            raise Failure("%s: error %s (%s), expected %s"
                          % (hold, ev.get("code"), ev.get("message"), expect["error"]))
        if "reason" in expect:
            reasons = expect["reason"] if isinstance(expect["reason"], list) else [expect["reason"]]
            if ev.get("reason") not in reasons:
                raise Failure("%s lost with reason %s, expected %s" % (hold, ev.get("reason"),
                                                                       reasons))
        if "reason_is" in expect and ev.get("reason") != expect["reason_is"]:
            raise Failure("%s: reason %r, expected %r" % (hold, ev.get("reason"),
                                                          expect["reason_is"]))
        for key in ("requester", "message_has"):
            if key in expect:
                field = "message" if key == "message_has" else key
                if expect[key] not in str(ev.get(field, "")):
                    raise Failure("%s: %s %r lacks %r" % (hold, field, ev.get(field), expect[key]))
        if "token_above" in expect:
            other = self.holds[expect["token_above"]]["token"]
            if not int(ev["token"]) > other:
                raise Failure("%s's token %s is not above %s's %s"
                              % (hold, ev["token"], expect["token_above"], other))
        return ev

    def expect_reply(self, reply, expect):
        if "error" in expect:
            if reply.get("error") != expect["error"]:
                raise Failure("reply %s, expected error %s" % (json.dumps(reply), expect["error"]))
            return
        if "error" in reply:
            raise Failure("reply %s" % json.dumps(reply))
        for key in ("holders", "waiters", "names", "holder_identities"):
            if key in expect and reply.get(key) != expect[key]:
                raise Failure("%s %s, expected %s" % (key, reply.get(key), expect[key]))

    def token_of(self, hold, s):
        """The fencing token of a hold: the one its ACQUIRED carried; for a
        hold still waiting (a token is only handed out with ACQUIRED), its
        node's token as Describe shows it, read with the CLI through the
        step's client's target (the waiter whose owner is the hold's
        client; the library under test then checks that token)."""
        self.drain_events()  # an ACQUIRED already written counts
        h = self.holds[hold]
        if h["token"] is not None:
            return h["token"]
        cli = os.path.join(self.build, "client", "turnstile")
        r = subprocess.run([cli, "--server", self.targets[s["client"]], "--output", "json",
                            "--rpc-timeout", "5s", "describe", h["lock"]],
                           env=self.cli_env, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise Failure("turnstile describe %s (for %s's token) exited %d: %s"
                          % (h["lock"], hold, r.returncode, r.stdout + r.stderr))
        waiting = [c for c in json.loads(r.stdout)["contenders"]
                   if c["role"].lower() == "waiter" and c["owner"] == h["client"]]
        if len(waiting) != 1:
            raise Failure("%s is not the one waiter of %s owned by %s: %s"
                          % (hold, h["lock"], h["client"], r.stdout.strip()))
        return int(waiting[0]["fencing_token"])

    def expect_check(self, reply, s):
        """A CheckToken reply: the expected verdict (or error), linearizable
        unless the step asked for a stale answer, and with "highest_of" the
        highest holder token being that hold's."""
        expect = s.get("expect", {})
        if isinstance(expect, dict):
            return self.expect_reply(reply, expect)
        if "error" in reply:
            raise Failure("reply %s, expected %s" % (json.dumps(reply), expect))
        if str(reply.get("verdict", "")).lower() != expect:
            raise Failure("verdict %s, expected %s (reply %s)"
                          % (reply.get("verdict"), expect, json.dumps(reply)))
        stale = bool(s.get("stale", False))
        if reply.get("linearizable") is not (not stale):
            raise Failure("linearizable %s with stale %s" % (reply.get("linearizable"), stale))
        if "highest_of" in s:
            want = self.token_of(s["highest_of"], s)
            if int(reply.get("highest_holder_token", -1)) != want:
                raise Failure("highest_holder_token %s, expected %s's %d"
                              % (reply.get("highest_holder_token"), s["highest_of"], want))

    def fault(self, s):
        kind = s["fault"]
        if kind in ("kill_replica", "drain_replica"):
            r = self.replicas[s["replica"]]
            r.signal(signal.SIGKILL if kind == "kill_replica" else signal.SIGTERM)
        elif kind in ("pause_client", "resume_client"):
            c = self.clients[s["client"]]
            os.kill(c.proc.pid, signal.SIGSTOP if kind == "pause_client" else signal.SIGCONT)
        else:
            raise Failure("unknown fault %r" % kind)

    def contend(self, c, within):
        """Clients take turns on one fenced lock: each acquires, and once it
        is told ACQUIRED releases and queues again, `cycles` times. The
        fenced register (tokens strictly increasing in grant order, which
        is FIFO by arrival: a token is its node's creation order) and
        exclusion are checked on every grant."""
        lock, cycles, clients = c["lock"], c["cycles"], c["clients"]
        self.fenced.add(lock)
        left = {name: cycles for name in clients}
        serial = {name: 0 for name in clients}

        def start(name):
            serial[name] += 1
            hold = "%s-%s-%d" % (lock, name, serial[name])
            self.holds[hold] = {"client": name, "lock": lock, "token": None, "lease": None,
                                "released_sent": False, "kind": "exclusive"}
            self.clients[name].send({"cmd": "acquire", "hold": hold, "lock": lock,
                                     "wait_ms": within, "owner": name})
            return hold

        live = {start(name): name for name in clients}
        grants = 0
        deadline = time.monotonic() + within / 1000.0 * max(1, cycles)
        while live:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise Failure("contention did not finish: %d grants" % grants)
            try:
                ev = self._take(left_s)
            except queue.Empty:
                continue
            hold = ev.get("hold")
            if hold not in live:
                continue
            name = live[hold]
            if ev.get("event") == "error":
                raise Failure("%s: %s %s" % (hold, ev.get("code"), ev.get("message")))
            if ev.get("event") == "acquired":
                grants += 1
                self.holds[hold]["released_sent"] = True
                self.clients[name].send({"cmd": "release", "hold": hold})
            elif ev.get("event") == "released":
                del live[hold]
                left[name] -= 1
                if left[name] > 0:
                    live[start(name)] = name
            elif ev.get("event") == "lost":
                raise Failure("%s lost: %s" % (hold, ev.get("reason")))
        if grants != cycles * len(clients):
            raise Failure("%d grants, expected %d" % (grants, cycles * len(clients)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--lang", required=True,
                    help="cpp, python, python_aio (turnstile.aio), node, java, go, mixed (every "
                         "built language, round robin), or broken "
                         "(a runner that grants everything: the harness's own test)")
    ap.add_argument("--scenarios", default=os.path.join(HERE, "scenarios.json"))
    ap.add_argument("scenario")
    args = ap.parse_args()
    with open(args.scenarios) as f:
        scenarios = {s["name"]: s for s in json.load(f)["scenarios"]}
    if args.scenario not in scenarios:
        print("no scenario %r (have: %s)" % (args.scenario, ", ".join(sorted(scenarios))),
              file=sys.stderr)
        return 2
    langs = (["cpp", "python", "node", "java", "go", "python_aio"] if args.lang == "mixed"
             else [args.lang])
    start = time.monotonic()
    try:
        Scenario(scenarios[args.scenario], langs, os.path.abspath(args.build)).run()
    except Failure as f:
        print("FAIL %s [%s]: %s" % (args.scenario, args.lang, f))
        return 1
    print("PASS %s [%s] in %.1f s" % (args.scenario, args.lang, time.monotonic() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
