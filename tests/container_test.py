#!/usr/bin/python3
"""The container image, run for real (issue 24): builds deploy/docker/Dockerfile
with podman, runs two replicas from it against a ZooKeeper that this test
starts on loopback, and checks what an operator relies on:

  - every shared library of turnstiled and turnstile resolves in the runtime
    image (ldd inside it; a missing one is named);
  - the image runs as uid 10001, keeps its HEALTHCHECK, and its replicas take
    and hand over a lock through each of them (fencing tokens increase);
  - /metrics answers and counts the replica's own grants;
  - `podman healthcheck run` says healthy while SERVING and unhealthy while
    draining; SIGTERM drains (the holder is told LOST) and exits 0 within
    the drain, never by SIGKILL;
  - the turnstile services of docker-compose.yml, run by podman-compose with
    tests/container/compose.override.yml (the built image, and a ZooKeeper the
    test starts on the compose network's gateway), pass the same checks on
    the compose file's own network, ports, healthcheck and hardening.

    container_test.py --build BUILD_DIR

Runs as root with Debian's podman, runc, debootstrap and podman-compose
(deploy/debian-packages.txt) and no registry: the Dockerfile's base images
are made with `debootstrap --variant=minbase` from the mirror apt uses and
imported under the names its FROM lines use; the tarball is cached under
/var/cache/turnstile (TURNSTILE_CONTAINER_CACHE) and the base images stay as
the cache of later runs. Everything else it creates (image, containers) is
named after this run and removed at the end. Exit 0: passed; 1: failed; 77:
skipped, only when this machine cannot run containers at all (not root, or
the kernel refuses namespaces).

Each replica gets a network namespace of its own (slirp4netns): the image then
runs with its own defaults (gRPC on 0.0.0.0:7400, metrics on 0.0.0.0:9464), so
its HEALTHCHECK (127.0.0.1:7400 inside) checks that very replica, which two
replicas on the host network could not both have. The host's loopback is
10.0.2.2 inside (allow_host_loopback), where the test's ZooKeeper listens.
The compose services use the compose project's bridge network instead, as the
compose file does (podman-compose 1.0.3 adds --net PROJECT_default even when a
network_mode is given).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402

SKIP = 77
DOCKERFILE = os.path.join(TOP, "deploy", "docker", "Dockerfile")
IGNOREFILE = os.path.join(TOP, "deploy", "docker", "Dockerfile.dockerignore")
COMPOSE_FILE = os.path.join(TOP, "docker-compose.yml")
COMPOSE_OVERRIDE = os.path.join(HERE, "container", "compose.override.yml")
CONTAINERS_CONF = os.path.join(HERE, "container", "containers.conf")
LABEL = "turnstile-container-test"  # on the image; value: the pid of the run
HOST_LOOPBACK = "10.0.2.2"          # the host's 127.0.0.1 under slirp4netns
NETWORK = "slirp4netns:allow_host_loopback=true,port_handler=slirp4netns"
BASE_MAX_AGE_S = 30 * 86400         # refresh the cached base tarball monthly
DRAIN_S = 3                         # TURNSTILE_DRAIN_TIMEOUT of the replicas
COMPOSE_DRAIN_S = 10                # docker-compose.yml's TURNSTILE_DRAIN_TIMEOUT
STOP_TIMEOUT_S = 30                 # SIGKILL after this (compose stop_grace_period)


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def log(msg):
    print("[container_test %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def podman_env():
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = CONTAINERS_CONF
    return env


def run(argv, timeout, check=True, env=None, what=None):
    """Runs argv to completion within timeout seconds; returns (rc, output)."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=env or podman_env())
    except subprocess.TimeoutExpired:
        raise Failure("%s did not finish within %d s" % (what or " ".join(argv), timeout))
    if check and p.returncode != 0:
        raise Failure("%s failed (exit %d):\n%s" % (what or " ".join(argv), p.returncode,
                                                    p.stdout[-4000:]))
    return p.returncode, p.stdout


def podman(*args, timeout=60, check=True):
    return run(["podman"] + list(args), timeout, check)


# ---- can this machine run containers at all? --------------------------------

def check_machine():
    """Skip only when containers are impossible here; a missing package is a
    failure (tests/run.sh installs deploy/debian-packages.txt)."""
    if os.geteuid() != 0:
        raise Skip("needs root (debootstrap, and podman with runc as root)")
    r = subprocess.run(["unshare", "--mount", "--uts", "--ipc", "--net", "--pid", "--fork",
                        "true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=30)
    if r.returncode != 0:
        raise Skip("the kernel refuses new namespaces (unshare: %s)" % r.stderr.strip())
    if not os.path.isdir("/sys/fs/cgroup"):
        raise Skip("no cgroup filesystem")
    missing = [t for t in ("podman", "runc", "debootstrap", "podman-compose", "slirp4netns")
               if shutil.which(t) is None]
    if missing:
        raise Failure("missing %s: install deploy/debian-packages.txt "
                      "(deploy/local/install-deps.sh)" % ", ".join(missing))


def sweep_stale():
    """Removes what earlier runs that died unclean left: containers and
    networks are named turnstile-ct-PID..., images carry the label."""
    def dead(pid):
        return pid.isdigit() and not os.path.exists("/proc/" + pid)
    _, out = podman("ps", "-a", "--format", "{{.Names}}", check=False)
    for n in out.split():
        m = re.match(r"turnstile-ct-(\d+)-", n)
        if m and dead(m.group(1)):
            log("removing stale container %s" % n)
            podman("rm", "-f", "-t", "0", n, check=False)
    _, out = podman("network", "ls", "--format", "{{.Name}}", check=False)
    for n in out.split():
        m = re.match(r"turnstile-ct-(\d+)-", n)
        if m and dead(m.group(1)):
            podman("network", "rm", "-f", n, check=False)
    _, out = podman("images", "--filter", "label=" + LABEL,
                    "--format", "{{.ID}} {{index .Labels \"%s\"}}" % LABEL, check=False)
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and dead(parts[1]):
            log("removing stale image %s" % parts[0])
            podman("rmi", "-f", parts[0], check=False)


# ---- the base images: debootstrap, not a registry -----------------------------

def base_images():
    """The images the Dockerfile's FROM lines name that are not its own stages."""
    stages, bases = set(), []
    with open(DOCKERFILE) as f:
        for line in f:
            m = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
            if m:
                if m.group(1) not in stages and m.group(1) not in bases:
                    bases.append(m.group(1))
                if m.group(2):
                    stages.add(m.group(2))
    for b in bases:
        if not re.fullmatch(r"debian:bookworm(-slim)?", b):
            raise Failure("FROM %s: only debian:bookworm[-slim] can be made here "
                          "(debootstrap; no registry)" % b)
    return bases


def apt_mirrors():
    """(main, security) archive URIs from this machine's apt sources, so the
    base image uses the mirror the machine is allowed to reach."""
    main, security = None, None
    paths = ["/etc/apt/sources.list"]
    d = "/etc/apt/sources.list.d"
    if os.path.isdir(d):
        paths += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    for p in paths:
        try:
            text = open(p).read()
        except OSError:
            continue
        entries = []
        if p.endswith(".sources"):
            for block in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", block, re.M))
                if fields.get("Types", "").split()[:1] == ["deb"] or "deb" in fields.get("Types", "").split():
                    for uri in fields.get("URIs", "").split():
                        entries += [(uri, s) for s in fields.get("Suites", "").split()]
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    entries.append((m.group(1), m.group(2)))
        for uri, suite in entries:
            if suite == "bookworm" and main is None:
                main = uri.rstrip("/")
            elif suite == "bookworm-security" and security is None:
                security = uri.rstrip("/")
    return (main or "http://deb.debian.org/debian",
            security or "http://deb.debian.org/debian-security")


def make_base_tarball(path, work):
    main, security = apt_mirrors()
    root = os.path.join(work, "rootfs")
    log("debootstrap --variant=minbase bookworm from %s" % main)
    t0 = time.monotonic()
    rc, out = run(["debootstrap", "--variant=minbase", "bookworm", root, main], 900,
                  check=False, env=dict(os.environ))
    if rc != 0:
        raise Failure("debootstrap failed (exit %d):\n%s" % (rc, out[-4000:]))
    # The sources of Debian's own images: the release, its updates, security.
    os.remove(os.path.join(root, "etc", "apt", "sources.list"))
    with open(os.path.join(root, "etc", "apt", "sources.list.d", "debian.sources"), "w") as f:
        f.write("Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n"
                "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                "Types: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n"
                "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" % (main, security))
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for n in os.listdir(os.path.join(root, sub)):
            q = os.path.join(root, sub, n)
            if os.path.isfile(q):
                os.remove(q)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".%d.tmp" % os.getpid()
    run(["tar", "--numeric-owner", "-C", root, "-cf", tmp, "."], 300, env=dict(os.environ))
    os.replace(tmp, path)
    shutil.rmtree(root, ignore_errors=True)
    log("base tarball made in %.0f s: %s" % (time.monotonic() - t0, path))


def ensure_base_images(work):
    bases = base_images()
    missing = [b for b in bases if podman("image", "exists", b, check=False)[0] != 0]
    if not missing:
        log("base images present: %s" % ", ".join(bases))
        return
    cache = os.environ.get("TURNSTILE_CONTAINER_CACHE", "/var/cache/turnstile")
    tarball = os.path.join(cache, "debian-bookworm-minbase.tar")
    fresh = os.path.exists(tarball) and time.time() - os.path.getmtime(tarball) < BASE_MAX_AGE_S
    if not fresh:
        make_base_tarball(tarball, work)
    for b in missing:
        podman("import", "--change", "CMD [\"bash\"]", tarball, b, timeout=300)
        log("imported %s as %s" % (tarball, b))


# ---- the image -----------------------------------------------------------------

def build_image(image, work):
    log("building %s from %s (podman build --format docker)" % (image, DOCKERFILE))
    t0 = time.monotonic()
    # --format docker keeps HEALTHCHECK (OCI image configs have none);
    # --layers=false leaves no intermediate images behind; --network host:
    # the RUN steps reach the Debian archive like the machine does.
    rc, out = run(["podman", "build", "--pull=never", "--format", "docker", "--layers=false",
                   "--network", "host", "--ignorefile", IGNOREFILE, "-f", DOCKERFILE,
                   "--label", "%s=%d" % (LABEL, os.getpid()), "-t", image, TOP],
                  1500, check=False)
    with open(os.path.join(work, "build.log"), "w") as f:
        f.write(out)
    if rc != 0:
        raise Failure("podman build failed (exit %d):\n%s" % (rc, out[-6000:]))
    log("image built in %.0f s" % (time.monotonic() - t0))


def check_image(image):
    """The image's own configuration, and that every shared library of both
    binaries resolves inside it (a missing runtime package is named)."""
    _, out = podman("image", "inspect", image)
    info = json.loads(out)[0]
    if info["Config"].get("User") != "10001:10001":
        raise Failure("image USER is %r, not 10001:10001" % info["Config"].get("User"))
    hc = (info.get("Healthcheck") or {}).get("Test") or []
    if hc[:2] != ["CMD", "turnstile"] or "health" not in hc:
        raise Failure("image has no `turnstile health` HEALTHCHECK (build with --format "
                      "docker): %s" % info.get("Healthcheck"))
    rc, out = podman("run", "--rm", "--network", "none", "--entrypoint", "ldd", image,
                     "/usr/local/bin/turnstiled", "/usr/local/bin/turnstile", check=False)
    unresolved = sorted(set(re.findall(r"^\s*(\S+) => not found", out, re.M)))
    if unresolved:
        lines = [l for l in out.splitlines() if l.endswith(":") or "not found" in l]
        raise Failure("shared libraries missing from the runtime image (add their Debian "
                      "packages to deploy/docker/runtime-packages.txt): %s\n%s"
                      % (", ".join(unresolved), "\n".join(lines)))
    if rc != 0:
        raise Failure("ldd in the image failed (exit %d):\n%s" % (rc, out))
    log("ldd: every shared library of turnstiled and turnstile resolves in the image")


# ---- replicas ----------------------------------------------------------------------

class Container:
    """A replica started from the image, its gRPC and metrics ports published
    on the host's loopback."""

    def __init__(self, name, grpc_port, metrics_port):
        self.name = name
        self.address = "127.0.0.1:%d" % grpc_port
        self.metrics = "http://127.0.0.1:%d/metrics" % metrics_port

    def inspect(self, fmt):
        return podman("inspect", self.name, "--format", fmt)[1].strip()

    def logs(self):
        return podman("logs", self.name, check=False)[1][-4000:]

    def wait_serving(self, cli, within_s=60):
        deadline = time.monotonic() + within_s
        while True:
            r = subprocess.run([cli, "--server", self.address, "--rpc-timeout", "2s", "health"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode == 0:
                return
            if self.inspect("{{.State.Running}}") != "true":
                raise Failure("%s exited (%s):\n%s" % (self.name, self.inspect("{{.State.ExitCode}}"),
                                                       self.logs()))
            if time.monotonic() > deadline:
                raise Failure("%s is not SERVING at %s within %d s:\n%s"
                              % (self.name, self.address, within_s, self.logs()))
            time.sleep(0.1)  # polling a starting replica's health: no event to wait on

    def check_uid(self):
        """The replica's process, seen from the host (no user namespace)."""
        pid = self.inspect("{{.State.Pid}}")
        with open("/proc/%s/status" % pid) as f:
            status = f.read()
        uids = re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()
        gids = re.search(r"^Gid:\s+(.*)$", status, re.M).group(1).split()
        comm = re.search(r"^Name:\s+(.*)$", status, re.M).group(1)
        if comm != "turnstiled" or set(uids) != {"10001"} or set(gids) != {"10001"}:
            raise Failure("%s: pid %s (%s) runs as uid %s gid %s, not 10001"
                          % (self.name, pid, comm, uids, gids))

    def healthcheck(self):
        """`podman healthcheck run`: the image's (or compose's) HEALTHCHECK."""
        rc, out = podman("healthcheck", "run", self.name, timeout=30, check=False)
        return rc, out.strip()

    def acquired_count(self):
        """turnstile_acquires_total{result="acquired"} of its /metrics."""
        try:
            with urllib.request.urlopen(self.metrics, timeout=10) as r:
                body = r.read().decode()
        except OSError as e:
            raise Failure("%s: GET %s failed: %s" % (self.name, self.metrics, e))
        m = re.search(r'^turnstile_acquires_total\{[^}]*result="acquired"[^}]*\} (\S+)$', body, re.M)
        if not m or "turnstile_build_info" not in body:
            raise Failure("%s: %s has no turnstile metrics:\n%s" % (self.name, self.metrics, body[:2000]))
        return float(m.group(1))


def free_port():
    return harness.free_port()


class Cli:
    """One `turnstile --output json acquire` (the host's CLI) and its events."""

    def __init__(self, cli, server, name, owner, extra=()):
        self.proc = subprocess.Popen([cli, "--server", server, "--output", "json", "--owner", owner,
                                      "acquire", name] + list(extra),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.strip())
                self.cv.notify_all()
        with self.cv:
            self.lines.append(None)  # end of output
            self.cv.notify_all()

    def await_event(self, event, within_s, what):
        """The first JSON line with this event; fails at end of output or the deadline."""
        deadline = time.monotonic() + within_s
        with self.cv:
            i = 0
            while True:
                while i < len(self.lines):
                    line = self.lines[i]
                    i += 1
                    if line is None:
                        raise Failure("%s: the CLI ended (exit %s) before %r; it printed %s"
                                      % (what, self.proc.wait(), event, self.lines[:-1]))
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if ev.get("event") == event or ev.get("state") == event:
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failure("%s: no %r within %d s; the CLI printed %s"
                                  % (what, event, within_s, self.lines))
                self.cv.wait(left)

    def wait(self, within_s):
        try:
            return self.proc.wait(within_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure("the CLI did not exit within %d s: %s" % (within_s, self.lines))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def describe(cli, server, name):
    rc, out = run([cli, "--server", server, "--output", "json", "describe", name], 30,
                  check=False, env=dict(os.environ))
    if rc != 0:
        raise Failure("describe %s at %s failed (exit %d): %s" % (name, server, rc, out))
    return json.loads(out)


def hand_over(cli, a, b, lock):
    """A holder through replica a, a waiter through replica b: b's waiter is
    queued behind a's holder (Describe through b shows both, with their
    replicas), is granted when the holder lets go, and gets a larger fencing
    token."""
    holder = Cli(cli, a.address, lock, "holder-" + a.name)
    waiter = None
    try:
        first = holder.await_event("acquired", 30, "holder via " + a.name)
        waiter = Cli(cli, b.address, lock, "waiter-" + b.name, ["--hold", "200ms"])
        waiter.await_event("queued", 30, "waiter via " + b.name)
        d = describe(cli, b.address, lock)
        holders = [(c["owner"], c["replica_id"]) for c in d["contenders"] if c["role"] == "holder"]
        waiters = [(c["owner"], c["replica_id"]) for c in d["contenders"] if c["role"] == "waiter"]
        if holders != [("holder-" + a.name, a.replica_id)] or \
                waiters != [("waiter-" + b.name, b.replica_id)]:
            raise Failure("describe %s via %s: holders %s, waiters %s" % (lock, b.name, holders, waiters))
        holder.proc.send_signal(signal.SIGINT)
        holder.await_event("released", 30, "holder via " + a.name)
        second = waiter.await_event("acquired", 30, "waiter via " + b.name)
        if int(second["fencing_token"]) <= int(first["fencing_token"]):
            raise Failure("fencing token went from %s to %s" % (first["fencing_token"],
                                                                  second["fencing_token"]))
        waiter.await_event("released", 30, "waiter via " + b.name)
        if holder.wait(30) != 0 or waiter.wait(30) != 0:
            raise Failure("CLI exit codes %s, %s" % (holder.proc.returncode, waiter.proc.returncode))
        log("%s: held via %s (token %s), handed over to %s (token %s)"
            % (lock, a.name, first["fencing_token"], b.name, second["fencing_token"]))
    finally:
        holder.stop()
        if waiter:
            waiter.stop()


def exercise(cli, replicas, tag):
    """What every pair of replicas from the image must do."""
    a, b = replicas
    for r in replicas:
        r.wait_serving(cli)
        r.check_uid()
        rc, out = r.healthcheck()
        if rc != 0:
            raise Failure("%s: podman healthcheck run says %r (exit %d) while SERVING"
                          % (r.name, out, rc))
    log("%s: both SERVING, uid 10001, healthcheck healthy" % tag)
    before = [r.acquired_count() for r in replicas]
    hand_over(cli, a, b, "container-test/%s/a-to-b" % tag)
    hand_over(cli, b, a, "container-test/%s/b-to-a" % tag)
    after = [r.acquired_count() for r in replicas]
    for r, x, y in zip(replicas, before, after):
        if y - x != 2:
            raise Failure("%s: turnstile_acquires_total{result=\"acquired\"} went %s -> %s, "
                          "not +2" % (r.name, x, y))
    log("%s: /metrics of each counts its 2 grants" % tag)


def drain(cli, r, tag, drain_s):
    """SIGTERM under a hold: NOT_SERVING (the HEALTHCHECK fails) while
    draining, the holder LOST after the drain, exit 0 without SIGKILL."""
    holder = Cli(cli, r.address, "container-test/%s/drain" % tag, "drain-holder")
    try:
        holder.await_event("acquired", 30, "drain holder via " + r.name)
        t0 = time.monotonic()
        podman("kill", "--signal", "TERM", r.name)
        deadline = time.monotonic() + drain_s + 10
        while True:
            rc, out = r.healthcheck()
            if rc != 0:
                break
            if time.monotonic() > deadline:
                raise Failure("%s: healthcheck still %r after SIGTERM" % (r.name, out))
            time.sleep(0.1)  # polling the health check: no event to wait on
        lost = holder.await_event("LOST", drain_s + 20, "drain holder via " + r.name)
        rc, out = podman("wait", r.name, timeout=STOP_TIMEOUT_S)
        took = time.monotonic() - t0
        code = out.strip().splitlines()[-1]
        if code != "0":
            raise Failure("%s exited %s after SIGTERM, not 0:\n%s" % (r.name, code, r.logs()))
        if took >= STOP_TIMEOUT_S:
            raise Failure("%s took %.1f s to drain" % (r.name, took))
        log("%s: SIGTERM -> unhealthy while draining, holder LOST (%s), exit 0 after %.1f s"
            % (r.name, lost.get("reason") or lost, took))
    finally:
        holder.stop()


def stop_clean(r):
    """SIGTERM without holds: exit 0, well before SIGKILL."""
    t0 = time.monotonic()
    podman("stop", "--time", str(STOP_TIMEOUT_S), r.name, timeout=STOP_TIMEOUT_S + 30)
    code = r.inspect("{{.State.ExitCode}}")
    took = time.monotonic() - t0
    if code != "0" or took >= STOP_TIMEOUT_S:
        raise Failure("%s: exit %s after %.1f s of podman stop:\n%s" % (r.name, code, took, r.logs()))
    log("%s: podman stop -> exit 0 after %.1f s" % (r.name, took))


def run_replicas(image, zk, cli, run_id, names):
    """Two replicas of the image as an operator would run them (read-only,
    no capabilities, no new privileges), defaults untouched but ZooKeeper."""
    replicas = []
    for i in (1, 2):
        g, m = free_port(), free_port()
        r = Container("%s-%d" % (run_id, i), g, m)
        r.replica_id = "container-%d" % i
        names.append(r.name)
        podman("run", "-d", "--name", r.name,
               "--network", NETWORK, "-p", "127.0.0.1:%d:7400" % g, "-p", "127.0.0.1:%d:9464" % m,
               "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges", "--stop-timeout", str(STOP_TIMEOUT_S),
               "-e", "TURNSTILE_ZK=%s:%d" % (HOST_LOOPBACK, zk.port),
               "-e", "TURNSTILE_ZK_ROOT=/container-test-%d" % os.getpid(),
               "-e", "TURNSTILE_REPLICA_ID=" + r.replica_id,
               "-e", "TURNSTILE_DRAIN_TIMEOUT=%ds" % DRAIN_S, image)
        replicas.append(r)
    return replicas


# ---- docker-compose.yml's turnstile services ---------------------------------------

class GatewayZooKeeper(harness.ZooKeeper):
    """A standalone ZooKeeper listening on one address of this host (the
    compose network's gateway: containers on it reach it there, nothing
    outside this machine does)."""

    def __init__(self, tmp, address, port):
        self.dir = os.path.join(tmp, "zk-" + address)
        os.makedirs(self.dir)
        self.address, self.port = address, port
        cfg = os.path.join(self.dir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\n"
                    "clientPortAddress=%s\nmaxClientCnxns=0\nforceSync=no\n"
                    "4lw.commands.whitelist=*\nadmin.enableServer=false\n"
                    "minSessionTimeout=1000\n" % (self.dir, port, address))
        self.log = open(os.path.join(self.dir, "zk.log"), "w")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + self.dir, "-cp", harness.ZK_CLASSPATH,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_up(self, within_s=60):
        deadline = time.monotonic() + within_s
        while True:
            try:
                with socket.create_connection((self.address, self.port), timeout=2) as s:
                    s.sendall(b"ruok")
                    if s.recv(16) == b"imok":
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Failure("ZooKeeper on %s:%d did not start (see %s)"
                              % (self.address, self.port, self.log.name))
            time.sleep(0.1)  # polling a server that is starting: no event to wait on


def compose_replicas(image, cli, project, work, names, networks, zks):
    """turnstile-1 and turnstile-2 of docker-compose.yml, by podman-compose,
    on the compose project's own network with the ports the compose file
    publishes, and the override pointing them at a ZooKeeper on that
    network's gateway (host.containers.internal). `run --no-deps` (one
    container per service): podman-compose 1.0.3's `up` ignores --no-deps and
    would start zk1..zk3, whose image cannot be pulled here."""
    zk_port = free_port()
    env = podman_env()
    env.update(TURNSTILE_TEST_IMAGE=image,
               TURNSTILE_TEST_ZK="host.containers.internal:%d" % zk_port,
               TURNSTILE_TEST_ZK_ROOT="/container-test-compose-%d" % os.getpid())
    replicas = []
    for svc, port in (("turnstile-1", 7400), ("turnstile-2", 7401)):
        r = Container("%s-%s" % (project, svc), port, 1)
        r.replica_id = svc
        names.append(r.name)
        if not networks:
            networks.append(project + "_default")  # podman-compose makes it
        run(["podman-compose", "-p", project, "-f", COMPOSE_FILE, "-f", COMPOSE_OVERRIDE,
             "run", "--no-deps", "-d", "-T", "--service-ports", "--name", r.name, svc],
            120, env=env, what="podman-compose run %s" % svc)
        # The compose file publishes only gRPC; Prometheus scrapes :9464 on
        # the compose network. Read /metrics from inside the container.
        r.acquired_count = (lambda r=r: metrics_inside(r))
        replicas.append(r)
    for r in replicas:
        for key, want in (("{{.HostConfig.ReadonlyRootfs}}", "true"),
                          ("{{.ImageName}}", image)):
            if r.inspect(key) != want:
                raise Failure("%s: %s is %s, not %s" % (r.name, key, r.inspect(key), want))
    # The replicas wait for ZooKeeper by themselves; it can listen on the
    # gateway now that the network's bridge is up.
    _, gw = podman("network", "inspect", networks[0], "--format",
                   "{{range .Subnets}}{{.Gateway}} {{end}}")
    zk = GatewayZooKeeper(work, gw.split()[0], zk_port)
    zks.append(zk)
    zk.wait_up()
    return replicas


def metrics_inside(r):
    rc, out = podman("exec", r.name, "bash", "-c",
                     "exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3",
                     timeout=30, check=False)
    m = re.search(r'^turnstile_acquires_total\{[^}]*result="acquired"[^}]*\} (\S+)\r?$', out, re.M)
    if rc != 0 or not m:
        raise Failure("%s: /metrics inside the container: %s" % (r.name, out[:2000]))
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--no-compose", action="store_true", help="skip the docker-compose.yml part")
    ap.add_argument("--image", help="test this already built image (kept) instead of building one")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    cli = os.path.join(build, "client", "turnstile")
    run_id = "turnstile-ct-%d" % os.getpid()
    image = args.image or "localhost/%s:%d" % (LABEL, os.getpid())
    work = tempfile.mkdtemp(prefix="turnstile-container-test-")
    names, networks, zks, zk, built = [], [], [], None, False
    t_start = time.monotonic()
    try:
        check_machine()
        sweep_stale()
        if not args.image:
            ensure_base_images(work)
            build_image(image, work)
            built = True
        check_image(image)
        zk = harness.ZooKeeper(work)
        replicas = run_replicas(image, zk, cli, run_id, names)
        exercise(cli, replicas, "run")
        drain(cli, replicas[0], "run", DRAIN_S)
        stop_clean(replicas[1])
        if not args.no_compose:
            for p in (7400, 7401):
                if subprocess.run(["ss", "-Hltn", "sport = :%d" % p], stdout=subprocess.PIPE,
                                  text=True).stdout.strip():
                    raise Failure("docker-compose.yml publishes 127.0.0.1:%d, which is in use" % p)
            replicas = compose_replicas(image, cli, run_id + "-compose", work, names,
                                        networks, zks)
            exercise(cli, replicas, "compose")
            drain(cli, replicas[0], "compose", COMPOSE_DRAIN_S)
            stop_clean(replicas[1])
        log("PASS in %.0f s" % (time.monotonic() - t_start))
        return 0
    except Skip as s:
        print("SKIP container_test: this machine cannot run containers: %s" % s, flush=True)
        return SKIP
    except (Failure, harness.Failure) as f:
        print("FAIL container_test: %s" % f, flush=True)
        return 1
    finally:
        for n in names:
            podman("rm", "-f", "-t", "0", n, check=False)
        if built:
            podman("rmi", "-f", image, check=False)
        for n in networks:
            podman("network", "rm", "-f", n, check=False)
        for z in zks + ([zk] if zk is not None else []):
            z.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
