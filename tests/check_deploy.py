#!/usr/bin/python3
"""Static checks of turnstile's deployment files (no Docker engine, no cluster).

Run through tests/check_deploy.sh, which prepares node + kubernetes-models.

  compose     docker-compose.yml parses (duplicate keys are errors); every
              depends_on, bind mount, build context and Dockerfile exists;
              published ports are unique and bound to 127.0.0.1; the ZooKeeper
              ensemble's ZOO_SERVERS lists exactly its services with matching
              ZOO_MY_ID; the replicas' TURNSTILE_ZK names exactly the ensemble
              at its client port; Prometheus targets == the services and ports
              that serve metrics; Grafana provisioning paths match the mounts.
  dockerfile  build stage installs exactly deploy/debian-packages.txt (through
              deploy/local/install-deps.sh, as the README set-up does) and
              builds the two targets in Release; runtime stage is
              bookworm-slim and installs exactly the packages that provide the
              binaries' NEEDED libraries; numeric non-root USER; EXPOSE ==
              listen ports; ENV/ENTRYPOINT flags accepted by turnstiled;
              HEALTHCHECK runs `turnstile ... health` on the listen port.
  k8s         every manifest passes the Kubernetes API schema
              (kubernetes-models) with no unknown fields, plus project rules
              (selectors, probes, grace period vs drain timeout, env ==
              turnstiled flags, anti-affinity, PDBs, ZooKeeper ensemble,
              kustomization completeness, scrape annotations).
  readme      the README sections exist and name real services, ports, paths.

The same check functions run against mutated copies in
tests/check_deploy_mutations.py, which proves that each rule catches a break.
"""

import argparse
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import yaml

COMPOSE_FILE = "docker-compose.yml"
DOCKERFILE = "deploy/docker/Dockerfile"
DOCKERIGNORE = "deploy/docker/Dockerfile.dockerignore"
RUNTIME_LIST = "deploy/docker/runtime-packages.txt"
BUILD_LIST = "deploy/debian-packages.txt"
INSTALL_DEPS = "deploy/local/install-deps.sh"
K8S_DIR = "deploy/k8s"
KUSTOMIZATION = "deploy/k8s/kustomization.yaml"

DRAIN_MARGIN_MS = 5000  # grace period must exceed the drain timeout by this much
ZK_IMAGE_RE = re.compile(r"^zookeeper:3\.8(\.\d+)?$")
PROMETHEUS_PROVIDER = "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider"

# ----------------------------------------------------------------------------
# YAML: strict (duplicate keys are errors, as in kubectl and docker compose).


class StrictLoader(yaml.SafeLoader):
    pass


def _strict_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]


# ----------------------------------------------------------------------------
# Facts taken from the built binaries (computed once, reused by mutations).

FLAG_RE = re.compile(r'^\s+--([a-z0-9-]+) \(([A-Z0-9_]+), default "(.*)"\)$')


def parse_flag_help(text):
    flags, lines = {}, text.splitlines()
    for i, line in enumerate(lines):
        m = FLAG_RE.match(line)
        if m:
            desc = lines[i + 1].strip() if i + 1 < len(lines) else ""
            flags[m.group(1)] = {"env": m.group(2), "default": m.group(3), "help": desc}
    return flags


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def package_of(path):
    """Debian package owning a library path (tries the merged-/usr aliases)."""
    cands = [path, os.path.realpath(path)]
    for c in list(cands):
        if c.startswith("/usr/lib/"):
            cands.append(c[len("/usr"):])
        elif c.startswith("/lib/"):
            cands.append("/usr" + c)
    for c in cands:
        rc, out, _ = run(["dpkg", "-S", c])
        if rc == 0 and out.strip():
            return out.split(":", 1)[0].strip()
    return None


def binary_facts(turnstiled, turnstile):
    facts = {"turnstiled": os.path.abspath(turnstiled), "turnstile": os.path.abspath(turnstile)}
    rc, out, err = run([turnstiled, "--help"], env={})
    if rc != 0:
        raise SystemExit(f"FAIL: {turnstiled} --help exited {rc}: {err}")
    facts["flags"] = parse_flag_help(out)
    rc, out, err = run([turnstile, "--help"], env={})
    if rc != 0:
        raise SystemExit(f"FAIL: {turnstile} --help exited {rc}: {err}")
    facts["cli_flags"] = parse_flag_help(out)
    cmds, in_cmds = [], False
    for line in out.splitlines():
        if line.startswith("Commands:"):
            in_cmds = True
            continue
        if in_cmds:
            m = re.match(r"^  ([a-z][a-z0-9-]*)\b", line)
            if m:
                cmds.append(m.group(1))
            elif not line.strip():
                in_cmds = False
    facts["cli_commands"] = cmds
    # NEEDED libraries -> owning Debian packages.
    needed = {}
    for b in (turnstiled, turnstile):
        rc, out, err = run(["objdump", "-p", b])
        if rc != 0:
            raise SystemExit(f"FAIL: objdump -p {b}: {err}")
        rc2, ldd, _ = run(["ldd", b])
        paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
        for lib in re.findall(r"^\s*NEEDED\s+(\S+)", out, re.M):
            needed.setdefault(lib, {"path": paths.get(lib), "binaries": []})
            needed[lib]["binaries"].append(os.path.basename(b))
    for lib, info in needed.items():
        info["package"] = package_of(info["path"]) if info["path"] else None
    facts["needed"] = needed
    codename = ""
    if os.path.exists("/etc/os-release"):
        m = re.search(r"^VERSION_CODENAME=(\S+)", open("/etc/os-release").read(), re.M)
        codename = m.group(1) if m else ""
    facts["codename"] = codename
    return facts


# ----------------------------------------------------------------------------
# Small parsers.


def parse_duration_ms(text):
    """turnstiled's duration syntax (server/flags.cc): 500ms, 10s, 2m, 1h; bare = seconds.
    None if it does not parse (turnstiled itself rejects it then)."""
    text, scale, num = str(text), 1000, str(text)
    for suf, mult in (("ms", 1), ("s", 1000), ("m", 60000), ("h", 3600000)):
        if text.endswith(suf) and len(text) > len(suf):
            head = text[: -len(suf)]
            if suf in ("m", "s") and head.endswith("m"):
                continue
            num, scale = head, mult
            break
    try:
        return float(num) * scale
    except ValueError:
        return None


def parse_go_duration_ms(text):
    """docker compose durations: 1m30s, 30s, 500ms."""
    text = str(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"bad duration {text!r}")
    scale = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1000, "m": 60000, "h": 3600000}
    return sum(float(a) * scale[b] for a, b in parts)


def parse_quantity(q):
    q = str(q)
    m = re.match(r"^([0-9.]+)([a-zA-Z]*)$", q)
    if not m:
        raise ValueError(q)
    mult = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
            "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4}[m.group(2)]
    return float(m.group(1)) * mult


def split_hostport(addr):
    addr = str(addr)
    m = re.match(r"^\[([^\]]*)\]:(\d+)$", addr) or re.match(r"^([^:]*):(\d+)$", addr)
    if not m:
        return None
    return m.group(1), int(m.group(2))


def read_list(path):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


ZOO_SERVER_RE = re.compile(r"^server\.(\d+)=([^:;]+):(\d+):(\d+)(?::\w+)?(?:;(?:[^:;]+:)?(\d+))?$")


def parse_zoo_servers(value):
    """The official image's ZOO_SERVERS ("server.N=host:quorum:election;clientPort ...") as
    ({N: (host, quorum, election, clientPort or None)}, [entries that do not parse])."""
    entries, bad = {}, []
    for tok in value.split():
        m = ZOO_SERVER_RE.match(tok)
        if not m:
            bad.append(tok)
            continue
        entries[int(m.group(1))] = (m.group(2), int(m.group(3)), int(m.group(4)),
                                    int(m.group(5)) if m.group(5) else None)
    return entries, bad


def zoo_cfg_extra(value):
    """ZOO_CFG_EXTRA ("key=value key=value") as a dict."""
    return dict(kv.split("=", 1) for kv in value.split() if "=" in kv)


def four_letter_words_ok(probe_cmd, env, client_port):
    """ZooKeeper probes of the form `echo CMD | nc ... HOST PORT`: every CMD is
    whitelisted (ZOO_4LW_COMMANDS_WHITELIST) and PORT is the client port."""
    text = " ".join(probe_cmd) if isinstance(probe_cmd, list) else str(probe_cmd)
    uses = []
    for word, nc_args in re.findall(r"echo\s+([a-z]{4})\s*\|\s*nc\b([^|]*)", text):
        ports = re.findall(r"(?:^|\s)(\d+)(?=\s|$)", nc_args.strip())
        uses.append((word, ports[-1] if ports else "0"))  # nc [-opts] HOST PORT
    allowed = [w.strip() for w in env.get("ZOO_4LW_COMMANDS_WHITELIST", "srvr").split(",")]
    return bool(uses) and all(("*" in allowed or w in allowed) and int(p) == client_port for w, p in uses), uses, allowed


def selector_matches(selector, labels):
    """A Kubernetes LabelSelector (matchLabels + matchExpressions) against labels."""
    if not isinstance(selector, dict) or not selector:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def service_selector_matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ----------------------------------------------------------------------------
# Dockerfile parsing.


def parse_dockerfile(text):
    """[(line, INSTRUCTION, rest)] with continuations joined, comments dropped."""
    instrs, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        instrs.append((start, word.upper(), rest.strip()))
        buf = ""
    return instrs


def exec_or_shell(rest):
    rest = rest.strip()
    if rest.startswith("["):
        try:
            v = json.loads(rest)
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                return v, True
        except ValueError:
            pass
    return shlex.split(rest), False


def parse_env_instr(rest):
    toks = shlex.split(rest)
    if toks and "=" not in toks[0]:
        return {toks[0]: " ".join(toks[1:])}
    env = {}
    for t in toks:
        k, _, v = t.partition("=")
        env[k] = v
    return env


def dockerignore_excludes(patterns, path):
    """Whether a context path is excluded (simplified Docker matching: last match wins)."""
    excluded = False
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.strip("/")
        rx = "^" + re.escape(p).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*") \
            .replace(r"\*", "[^/]*").replace(r"\?", "[^/]") + "$"
        if any(re.match(rx, pre) for pre in prefixes):
            excluded = not neg
    return excluded


# ----------------------------------------------------------------------------


class Checker:
    _schema_cache = {}  # objects JSON -> validator output (same objects, same verdict)

    def __init__(self, root, facts, node_modules=None, schema_js=None, quiet=False):
        self.root = os.path.abspath(root)
        self.facts = facts
        self.node_modules = node_modules
        self.schema_js = schema_js
        self.quiet = quiet
        self.passed = {}
        self.failed = []
        self.flag_envs = {f["env"]: name for name, f in facts["flags"].items()}
        self.image = {}      # facts about the image (Dockerfile)
        self.compose = {}    # facts about the compose stack

    # -- reporting --
    def ok(self, section, msg):
        self.passed[section] = self.passed.get(section, 0) + 1
        if not self.quiet:
            print(f"  ok   [{section}] {msg}")

    def fail(self, section, msg):
        self.failed.append(f"[{section}] {msg}")
        if not self.quiet:
            print(f"FAIL: [{section}] {msg}")

    def expect(self, cond, section, msg, why=""):
        if cond:
            self.ok(section, msg)
        else:
            self.fail(section, msg + (f" -- {why}" if why else ""))
        return bool(cond)

    def path(self, rel):
        return os.path.join(self.root, rel)

    def inside_repo(self, p):
        rp = os.path.realpath(p)
        return rp == self.root or rp.startswith(self.root + os.sep)

    # -- turnstiled / turnstile as validators of flags and values --
    def turnstiled_accepts(self, env, args=()):
        """turnstiled parses every TURNSTILE_* value and flag before --help: exit 0 iff valid."""
        rc, _, err = run([self.facts["turnstiled"], *args, "--help"], env={k: str(v) for k, v in env.items()})
        return rc == 0, err.strip()

    def flag_value(self, flag, env, args=()):
        """Effective value of a turnstiled flag: argument > environment > default."""
        val = self.facts["flags"][flag]["default"]
        envname = self.facts["flags"][flag]["env"]
        if envname in env:
            val = env[envname]
        a = list(args)
        for i, t in enumerate(a):
            if t == f"--{flag}" and i + 1 < len(a):
                val = a[i + 1]
            elif t.startswith(f"--{flag}="):
                val = t.split("=", 1)[1]
        return val

    def check_turnstile_env(self, section, where, env, args=()):
        """Every variable is a real turnstiled flag's and turnstiled accepts every value."""
        bad = [k for k in env if k not in self.flag_envs]
        self.expect(not bad, section,
                    f"{where}: all {len(env)} TURNSTILE_* variables are turnstiled flags",
                    f"not a turnstiled flag's variable (turnstiled --help): {', '.join(sorted(bad))}")
        good_env = {k: v for k, v in env.items() if k in self.flag_envs}
        accepted, err = self.turnstiled_accepts(good_env, args)
        self.expect(accepted, section, f"{where}: turnstiled accepts the values and flags", err)
        level = env.get("TURNSTILE_LOG_LEVEL")
        help_text = self.facts["flags"].get("log-level", {}).get("help", "")
        levels = re.findall(r"[a-z]+", help_text.replace(" or ", ", "))
        if level is not None and levels:
            self.expect(level in levels, section, f"{where}: TURNSTILE_LOG_LEVEL={level} is one of {levels}")

    def check_listen(self, section, where, env, args=()):
        """In a container, listen on all interfaces; returns (grpc port, metrics port)."""
        ports = []
        for flag in ("listen", "metrics-listen"):
            hp = split_hostport(self.flag_value(flag, env, args))
            okhost = hp is not None and hp[0] in ("0.0.0.0", "", "::", "[::]") and hp[1] > 0
            self.expect(okhost, section, f"{where}: --{flag} listens on all interfaces at a fixed port",
                        f"got {self.flag_value(flag, env, args)!r}")
            ports.append(hp[1] if hp else None)
        return tuple(ports)

    # =========================================================================
    def check_dockerfile(self):
        S = "dockerfile"
        path = self.path(DOCKERFILE)
        if not self.expect(os.path.isfile(path), S, f"{DOCKERFILE} exists"):
            return
        instrs = parse_dockerfile(open(path, encoding="utf-8").read())
        stages = []
        for line, ins, rest in instrs:
            if ins == "FROM":
                m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
                stages.append({"image": m.group(1) if m else rest, "name": (m.group(2) if m else None),
                               "instrs": [], "line": line})
            elif stages:
                stages[-1]["instrs"].append((line, ins, rest))
        if not self.expect(len(stages) >= 2, S, f"multi-stage build ({len(stages)} stages)"):
            return
        final = stages[-1]
        self.expect(all(s["image"].startswith("debian:bookworm") for s in stages), S,
                    "every stage is Debian bookworm", str([s["image"] for s in stages]))
        self.expect(final["image"] == "debian:bookworm-slim", S, "runtime stage is debian:bookworm-slim",
                    f"got {final['image']}")
        by_name = {s["name"]: s for s in stages if s["name"]}
        froms = [re.search(r"--from=(\S+)", r).group(1) for _, i, r in final["instrs"]
                 if i == "COPY" and "--from=" in r]
        build = by_name.get(froms[0]) if froms else None
        if not self.expect(build is not None and build is not final, S,
                           "runtime stage copies from a named build stage", f"COPY --from={froms}"):
            return
        ignore = []
        if self.expect(os.path.isfile(self.path(DOCKERIGNORE)), S, f"{DOCKERIGNORE} exists (BuildKit per-Dockerfile ignore)"):
            ignore = read_list(self.path(DOCKERIGNORE))
            for p in (".git/HEAD", "build/server/turnstiled", "build/CMakeCache.txt"):
                self.expect(dockerignore_excludes(ignore, p), S, f"build context excludes {p}")

        def copies(stage):
            out = []
            for line, ins, rest in stage["instrs"]:
                if ins in ("COPY", "ADD"):
                    toks, _ = exec_or_shell(rest)
                    opts = [t for t in toks if t.startswith("--")]
                    args = [t for t in toks if not t.startswith("--")]
                    frm = next((o.split("=", 1)[1] for o in opts if o.startswith("--from=")), None)
                    out.append({"line": line, "from": frm, "srcs": args[:-1], "dest": args[-1] if args else ""})
            return out

        def workdir_at(stage, upto_line):
            wd = "/"
            for line, ins, rest in stage["instrs"]:
                if line > upto_line:
                    break
                if ins == "WORKDIR":
                    wd = os.path.normpath(os.path.join(wd, rest.strip()))
            return wd

        def dest_path(stage, c, src):
            d = c["dest"]
            wd = workdir_at(stage, c["line"])
            d = d if d.startswith("/") else os.path.join(wd, d)
            if c["dest"].endswith("/") or len(c["srcs"]) > 1:
                d = os.path.join(d, os.path.basename(src.rstrip("/")))
            return os.path.normpath(d)

        # Every context COPY source exists and is not excluded by the ignore file.
        for st in stages:
            for c in copies(st):
                if c["from"]:
                    continue
                for src in c["srcs"]:
                    self.expect(os.path.exists(self.path(src)), S, f"line {c['line']}: COPY source {src} exists")
                    self.expect(not dockerignore_excludes(ignore, src), S,
                                f"line {c['line']}: COPY source {src} is in the build context",
                                f"excluded by {DOCKERIGNORE}")

        # --- build stage: the one package list, through install-deps.sh ---
        bcopies = copies(build)
        dests = {}
        for c in bcopies:
            for src in c["srcs"]:
                dests[os.path.normpath(src)] = dest_path(build, c, src)
        script_dest = dests.get(INSTALL_DEPS)
        list_dest = dests.get(BUILD_LIST)
        self.expect(script_dest and list_dest, S,
                    f"build stage copies {BUILD_LIST} and {INSTALL_DEPS}", f"copied: {sorted(dests)}")
        script_text = open(self.path(INSTALL_DEPS), encoding="utf-8").read() if os.path.isfile(self.path(INSTALL_DEPS)) else ""
        reads_rel = re.search(r'\$here/\.\./debian-packages\.txt', script_text)
        self.expect(reads_rel, S, f"{INSTALL_DEPS} installs from ../debian-packages.txt (the one list)")
        if script_dest and list_dest:
            self.expect(os.path.normpath(os.path.join(os.path.dirname(script_dest), "..", "debian-packages.txt")) == list_dest,
                        S, "in the image the script finds the list where it looks for it",
                        f"script at {script_dest}, list at {list_dest}")
        runs = [(line, rest) for line, ins, rest in build["instrs"] if ins == "RUN"]
        uses_script = [line for line, r in runs if re.search(r"(^|[\s/])install-deps\.sh\b", r)]
        self.expect(uses_script, S, "build stage runs install-deps.sh")
        if script_dest:
            ok_path = any(re.search(r"(^|\s)(bash\s+)?" + re.escape(os.path.relpath(script_dest, workdir_at(build, ln))) + r"\b", r)
                          or script_dest in r for ln, r in runs if ln in uses_script)
            self.expect(ok_path, S, "build stage runs the copied install-deps.sh")
        other = [line for line, r in runs if re.search(r"\b(apt-get|apt|aptitude)\s+(-\S+\s+)*install\b|\bdpkg\s+-i\b", r)]
        self.expect(not other, S, "build stage installs no package outside the list",
                    f"apt-get/apt install in RUN at line(s) {other}")
        # Every package that is installed by the README set-up (the list) is what the image gets.
        self.expect(read_list(self.path(BUILD_LIST)), S, f"{BUILD_LIST} lists packages")
        cm = " ".join(r for _, r in runs)
        self.expect(re.search(r"cmake\s+-S\s+\.\s+-B\s+build\b", cm) and "-DCMAKE_BUILD_TYPE=Release" in cm, S,
                    "build stage configures a Release build into build/")
        tm = re.search(r"cmake\s+--build\s+build\b[^&;|]*--target\s+([^&;|]+)", cm)
        targets = set(tm.group(1).split()) if tm else set()
        exe_dirs = {}
        for d in ("server", "client"):
            f = self.path(f"{d}/CMakeLists.txt")
            if os.path.isfile(f):
                for name in re.findall(r"add_executable\(\s*([A-Za-z0-9_]+)", open(f).read()):
                    exe_dirs[name] = d
        self.expect(targets == {"turnstiled", "turnstile"}, S,
                    "build stage builds exactly the targets turnstiled and turnstile", f"--target {sorted(targets)}")
        self.expect(targets and targets <= set(exe_dirs), S,
                    "both targets are add_executable targets of server/ and client/",
                    f"targets {sorted(targets)}, executables {sorted(exe_dirs)}")
        # Everything CMake reads is copied.
        top = open(self.path("CMakeLists.txt")).read() if os.path.isfile(self.path("CMakeLists.txt")) else ""
        needed_dirs = ["CMakeLists.txt"] + re.findall(r"add_subdirectory\(\s*([A-Za-z0-9_./-]+)", top)
        copied = set(dests)
        missing = [d for d in needed_dirs if d not in copied and "." not in copied]
        self.expect(not missing, S, f"build stage copies CMakeLists.txt and every add_subdirectory ({len(needed_dirs) - 1})",
                    f"not copied: {missing}")

        # --- runtime stage ---
        build_wd = workdir_at(build, 10 ** 9)
        fcopies = copies(final)
        installed_bins = {}
        for c in fcopies:
            if c["from"] == build["name"]:
                for src in c["srcs"]:
                    installed_bins[os.path.basename(src)] = (src, dest_path(final, c, src))
        for name in ("turnstiled", "turnstile"):
            want = os.path.normpath(os.path.join(build_wd, "build", exe_dirs.get(name, "?"), name))
            got = installed_bins.get(name, (None, None))
            self.expect(got[0] and os.path.normpath(got[0]) == want, S,
                        f"runtime stage gets {name} from the build stage's {want}", f"got {got[0]}")
        rl_dest = None
        for c in fcopies:
            if not c["from"] and RUNTIME_LIST in [os.path.normpath(s) for s in c["srcs"]]:
                rl_dest = dest_path(final, c, RUNTIME_LIST)
        fruns = [(line, rest) for line, ins, rest in final["instrs"] if ins == "RUN"]
        inst = [(line, r) for line, r in fruns if re.search(r"\bapt-get\s+(-\S+\s+)*install\b", r)]
        self.expect(rl_dest and inst and all(rl_dest in r for _, r in inst), S,
                    f"runtime stage installs from {RUNTIME_LIST} (copied to {rl_dest})")
        extra = []
        for _, r in inst:
            for seg in re.split(r"&&|\|\||;|\|", r):
                m = re.search(r"\b(?:apt-get|apt)\s+(.*?\binstall\b)(.*)$", seg)
                if m:
                    extra += [t for t in m.group(2).split() if not t.startswith("-")]
        self.expect(not extra, S, "runtime stage names no package outside the list", f"extra: {extra}")
        self.check_runtime_packages()

        # USER, ENV, EXPOSE, ENTRYPOINT/CMD, HEALTHCHECK
        users = [rest for _, ins, rest in final["instrs"] if ins == "USER"]
        uid = None
        if users:
            m = re.match(r"^(\d+)(?::(\d+))?$", users[-1].strip())
            uid = int(m.group(1)) if m else None
        self.expect(uid is not None and uid > 0, S, f"runtime USER is a numeric non-root uid ({users[-1] if users else None})",
                    "Kubernetes runAsNonRoot needs a numeric USER")
        env = {}
        for _, ins, rest in final["instrs"]:
            if ins == "ENV":
                env.update(parse_env_instr(rest))
        tenv = {k: v for k, v in env.items() if k.startswith("TURNSTILE_")}
        entry = [exec_or_shell(r) for _, i, r in final["instrs"] if i == "ENTRYPOINT"]
        cmd = [exec_or_shell(r) for _, i, r in final["instrs"] if i == "CMD"]
        ep, ep_exec = entry[-1] if entry else ([], False)
        cargs, c_exec = cmd[-1] if cmd else ([], True)
        self.expect(ep and ep_exec and os.path.basename(ep[0]) == "turnstiled", S,
                    f"ENTRYPOINT is turnstiled in exec form (signals reach it): {ep}")
        if ep and "turnstiled" in installed_bins:
            dest = installed_bins["turnstiled"][1]
            self.expect(ep[0] == dest or (not ep[0].startswith("/") and os.path.dirname(dest) in
                                          ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin")), S,
                        f"ENTRYPOINT {ep[0]} is where turnstiled is installed ({dest})")
        args = list(ep[1:]) + list(cargs)
        self.expect(c_exec, S, "CMD (if any) is in exec form")
        self.check_turnstile_env(S, "image ENV + ENTRYPOINT/CMD", tenv, args)
        grpc_port, metrics_port = self.check_listen(S, "image", tenv, args)
        exposed = set()
        for _, ins, rest in final["instrs"]:
            if ins == "EXPOSE":
                exposed |= {int(p.split("/")[0]) for p in rest.split()}
        self.expect(exposed == {grpc_port, metrics_port}, S,
                    f"EXPOSE {sorted(exposed)} == gRPC and metrics listen ports {[grpc_port, metrics_port]}")
        hc = [r for _, i, r in final["instrs"] if i == "HEALTHCHECK"]
        hc_argv = None
        if self.expect(hc, S, "HEALTHCHECK is set"):
            m = re.search(r"\bCMD\s+(.*)$", hc[-1])
            if self.expect(m, S, "HEALTHCHECK has a CMD"):
                hc_argv, _ = exec_or_shell(m.group(1))
                self.check_health_cmd(S, "HEALTHCHECK", hc_argv, grpc_port, installed_bins)
        self.image = {"env": tenv, "args": args, "grpc_port": grpc_port, "metrics_port": metrics_port,
                      "uid": uid, "exposed": exposed}

    def check_health_cmd(self, S, where, argv, grpc_port, installed_bins=None):
        """`turnstile [--server 127.0.0.1:PORT] [global flags] health`, accepted by the CLI."""
        if not self.expect(argv and os.path.basename(argv[0]) == "turnstile", S,
                           f"{where} runs the turnstile CLI: {argv}"):
            return
        if installed_bins is not None and argv[0].startswith("/"):
            self.expect(installed_bins.get("turnstile", (None, None))[1] == argv[0], S,
                        f"{where}: {argv[0]} is where the image installs turnstile")
        i, server = 1, self.facts["cli_flags"].get("server", {}).get("default")
        while i < len(argv) and argv[i].startswith("--"):
            name = argv[i][2:].split("=", 1)[0]
            if "=" in argv[i]:
                val = argv[i].split("=", 1)[1]
                i += 1
            else:
                val = argv[i + 1] if i + 1 < len(argv) else None
                i += 2
            if name == "server":
                server = val
        command = argv[i] if i < len(argv) else None
        self.expect(command == "health" and "health" in self.facts["cli_commands"], S,
                    f"{where}: command is `health`, a command of `turnstile --help`",
                    f"command {command!r}; CLI commands {self.facts['cli_commands']}")
        rc, _, err = run([self.facts["turnstile"], *argv[1:i], "health", "--help"], env={})
        self.expect(rc == 0, S, f"{where}: the CLI accepts its global flags {argv[1:i]}", err.strip())
        hp = split_hostport(server) if server else None
        self.expect(hp and hp[0] in ("127.0.0.1", "localhost", "[::1]", "::1") and hp[1] == grpc_port, S,
                    f"{where}: asks 127.0.0.1 at the gRPC listen port {grpc_port} (--server {server})")

    def check_runtime_packages(self):
        S = "dockerfile"
        facts = self.facts
        self.expect(facts.get("codename") == "bookworm", S,
                    "this machine is Debian bookworm, like the image (library package names match)",
                    f"VERSION_CODENAME={facts.get('codename')}")
        unresolved = [lib for lib, i in facts["needed"].items() if not i.get("package")]
        self.expect(not unresolved, S, f"every NEEDED library of the binaries ({len(facts['needed'])}) maps to a Debian package",
                    f"unresolved: {unresolved}")
        want = {i["package"].split(":")[0] for i in facts["needed"].values() if i.get("package")}
        if not self.expect(os.path.isfile(self.path(RUNTIME_LIST)), S, f"{RUNTIME_LIST} exists"):
            return
        have = set(read_list(self.path(RUNTIME_LIST)))
        self.expect(want <= have, S, f"runtime list has every package providing a NEEDED library ({len(want)})",
                    f"missing: {sorted(want - have)} (needed by: " +
                    ", ".join(f"{l} -> {i['package']}" for l, i in sorted(facts['needed'].items())
                              if i.get('package') and i['package'].split(':')[0] in want - have) + ")")
        self.expect(have <= want, S, "runtime list has no package that provides no NEEDED library",
                    f"extra: {sorted(have - want)}")

    # =========================================================================
    def check_compose(self):
        S = "compose"
        path = self.path(COMPOSE_FILE)
        if not self.expect(os.path.isfile(path), S, f"{COMPOSE_FILE} exists"):
            return
        try:
            docs = load_yaml_docs(path)
        except yaml.YAMLError as e:
            self.fail(S, f"{COMPOSE_FILE} parses: {e}")
            return
        if not self.expect(len(docs) == 1 and isinstance(docs[0], dict), S,
                           f"{COMPOSE_FILE} parses (strict YAML, one mapping)"):
            return
        c = docs[0]
        top_known = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
        unknown = [k for k in c if k not in top_known and not str(k).startswith("x-")]
        self.expect(not unknown, S, "only known top-level keys", f"unknown: {unknown}")
        services = c.get("services") or {}
        if not self.expect(isinstance(services, dict) and services, S, f"{len(services)} services"):
            return
        svc_known = {
            "image", "build", "command", "entrypoint", "environment", "env_file", "ports", "expose",
            "volumes", "depends_on", "healthcheck", "restart", "hostname", "container_name", "user",
            "read_only", "tmpfs", "cap_drop", "cap_add", "security_opt", "stop_grace_period",
            "stop_signal", "init", "networks", "labels", "logging", "deploy", "ulimits", "working_dir",
            "pull_policy", "profiles", "extra_hosts", "dns", "platform", "mem_limit", "cpus", "shm_size",
            "configs", "secrets", "sysctls", "links", "domainname", "privileged", "network_mode",
        }
        for name, s in services.items():
            bad = [k for k in (s or {}) if k not in svc_known and not str(k).startswith("x-")]
            self.expect(not bad, S, f"{name}: only known service keys", f"unknown: {bad}")

        def envmap(s):
            e = s.get("environment") or {}
            if isinstance(e, list):
                e = dict(x.split("=", 1) if "=" in x else (x, "") for x in e)
            return {str(k): "" if v is None else str(v) for k, v in e.items()}

        def mounts(s):
            out = []
            for v in s.get("volumes") or []:
                if isinstance(v, str):
                    parts = v.split(":")
                    if len(parts) == 1:
                        out.append({"type": "volume", "source": None, "target": parts[0]})
                    else:
                        src = parts[0]
                        out.append({"type": "bind" if src.startswith((".", "/", "~")) else "volume",
                                    "source": src, "target": parts[1],
                                    "read_only": len(parts) > 2 and "ro" in parts[2].split(",")})
                elif isinstance(v, dict):
                    out.append({"type": v.get("type"), "source": v.get("source"), "target": v.get("target"),
                                "read_only": bool(v.get("read_only"))})
            return out

        def host_path(s, container_path):
            """Repo path mounted at container_path (longest mount prefix), or None."""
            best = None
            for m in mounts(s):
                t = m["target"].rstrip("/")
                if m["type"] == "bind" and (container_path == t or container_path.startswith(t + "/")):
                    if best is None or len(t) > len(best[0]):
                        best = (t, m["source"])
            if not best:
                return None
            rest = container_path[len(best[0]):].lstrip("/")
            return os.path.normpath(os.path.join(self.root, best[1], rest))

        # depends_on, mounts, build
        named_volumes = set((c.get("volumes") or {}).keys())
        for name, s in services.items():
            deps = s.get("depends_on") or []
            deps = list(deps.keys()) if isinstance(deps, dict) else list(deps)
            for d in deps:
                self.expect(d in services, S, f"{name}: depends_on {d} is a service")
            for m in mounts(s):
                if m["type"] == "bind":
                    hp = os.path.join(self.root, m["source"])
                    self.expect(os.path.exists(hp) and self.inside_repo(hp), S,
                                f"{name}: mounted {m['source']} exists in the repository")
                    self.expect(m.get("read_only"), S, f"{name}: {m['source']} is mounted read-only")
                elif m["source"]:
                    self.expect(m["source"] in named_volumes, S, f"{name}: volume {m['source']} is declared")
            b = s.get("build")
            if b is not None:
                b = {"context": b} if isinstance(b, str) else b
                ctx = os.path.join(self.root, b.get("context", "."))
                df = os.path.join(ctx, b.get("dockerfile", "Dockerfile"))
                self.expect(os.path.isdir(ctx) and self.inside_repo(ctx), S, f"{name}: build context {b.get('context')} exists")
                self.expect(os.path.isfile(df), S, f"{name}: Dockerfile {b.get('dockerfile')} exists")

        # Classify services.
        def image(s):
            return str(s.get("image") or "")
        zk = {n: s for n, s in services.items() if image(s).startswith("zookeeper:")}
        ts = {n: s for n, s in services.items()
              if isinstance(s.get("build"), dict) and os.path.normpath(s["build"].get("dockerfile", "")) == DOCKERFILE}
        prom = {n: s for n, s in services.items() if image(s).startswith("prom/prometheus")}
        graf = {n: s for n, s in services.items() if image(s).startswith("grafana/grafana")}
        self.expect(len(zk) == 3, S, f"3 ZooKeeper services ({sorted(zk)})")
        self.expect(len(ts) == 2, S, f"2 turnstile replicas built from {DOCKERFILE} ({sorted(ts)})")
        self.expect(len(prom) == 1 and len(graf) == 1, S, "one Prometheus and one Grafana service")
        for n, s in zk.items():
            self.expect(ZK_IMAGE_RE.match(image(s)), S, f"{n}: official zookeeper image, 3.8 line ({image(s)})")
        for n, s in list(prom.items()) + list(graf.items()):
            tag = image(s).rsplit(":", 1)[-1] if ":" in image(s) else ""
            self.expect(tag and tag != "latest", S, f"{n}: image pinned ({image(s)})")
        for n, s in ts.items():
            self.expect(os.path.normpath(s["build"].get("context", ".")) == ".", S,
                        f"{n}: build context is the repository root (the Dockerfile copies root-relative paths)")
        ts_images = {image(s) for s in ts.values()}
        self.expect(len(ts_images) == 1 and "" not in ts_images, S, f"replicas share one image tag {sorted(ts_images)}")

        # ZooKeeper ensemble.
        zk_client, zk_metrics, zk_ports = {}, {}, {}
        servers_seen = set()
        for n, s in zk.items():
            e = envmap(s)
            entries, bad = parse_zoo_servers(e.get("ZOO_SERVERS", ""))
            for tok in bad:
                self.fail(S, f"{n}: ZOO_SERVERS entry {tok!r} is server.N=host:quorum:election;clientPort")
            servers_seen.add(e.get("ZOO_SERVERS", ""))
            hosts = sorted(h for h, *_ in entries.values())
            self.expect(hosts == sorted(zk), S, f"{n}: ZOO_SERVERS lists exactly the ZooKeeper services",
                        f"hosts {hosts} vs services {sorted(zk)}")
            self.expect(len(entries) == len(e.get("ZOO_SERVERS", "").split()), S, f"{n}: ZOO_SERVERS ids are unique")
            mine = [sid for sid, (h, *_r) in entries.items() if h == n]
            myid = e.get("ZOO_MY_ID")
            self.expect(len(mine) == 1 and str(mine[0]) == str(myid), S,
                        f"{n}: ZOO_MY_ID={myid} is its own server.N in ZOO_SERVERS", f"entries for {n}: {mine}")
            if len(mine) == 1:
                cp = entries[mine[0]][3]
                self.expect(cp is not None, S, f"{n}: ZOO_SERVERS gives its client port")
                zk_client[n] = cp
                zk_ports[n] = entries[mine[0]][1:3]
            extra = zoo_cfg_extra(e.get("ZOO_CFG_EXTRA", ""))
            has_prov = extra.get("metricsProvider.className") == PROMETHEUS_PROVIDER
            self.expect(has_prov and extra.get("metricsProvider.httpPort", "").isdigit(), S,
                        f"{n}: Prometheus metrics provider on (ZOO_CFG_EXTRA), port {extra.get('metricsProvider.httpPort')}")
            if has_prov and extra.get("metricsProvider.httpPort", "").isdigit():
                zk_metrics[n] = int(extra["metricsProvider.httpPort"])
        for n, s in zk.items():
            test = (s.get("healthcheck") or {}).get("test")
            ok, uses, allowed = four_letter_words_ok(test or [], envmap(s), zk_client.get(n))
            self.expect(ok, S, f"{n}: healthcheck asks whitelisted four-letter words {uses} on the client port",
                        f"whitelist {allowed}, client port {zk_client.get(n)}")
        self.expect(len(servers_seen) == 1, S, "every ZooKeeper service has the same ZOO_SERVERS")
        ids = sorted(str(envmap(s).get("ZOO_MY_ID")) for s in zk.values())
        self.expect(len(set(ids)) == len(ids), S, f"ZOO_MY_ID values are unique ({ids})")

        # turnstile replicas.
        ts_ports = {}
        replica_ids = []
        for n, s in ts.items():
            env = dict(self.image.get("env", {}))
            cenv = envmap(s)
            tcenv = {k: v for k, v in cenv.items() if k.startswith("TURNSTILE_")}
            self.expect(len(tcenv) == len(cenv), S, f"{n}: sets only TURNSTILE_* variables",
                        f"others: {sorted(set(cenv) - set(tcenv))}")
            env.update(tcenv)
            self.check_turnstile_env(S, f"{n} environment (over the image's)", env, self.image.get("args", []))
            if s.get("command") is not None or s.get("entrypoint") is not None:
                self.fail(S, f"{n}: does not override the image's command/entrypoint")
            g, mport = self.check_listen(S, n, env, self.image.get("args", []))
            ts_ports[n] = (g, mport)
            self.expect(g == self.image.get("grpc_port") and mport == self.image.get("metrics_port"), S,
                        f"{n}: serves on the image's EXPOSEd ports")
            zks = self.flag_value("zk", env)
            members = []
            for part in zks.split("/", 1)[0].split(","):
                hp = split_hostport(part)
                members.append(hp)
            self.expect(all(members) and sorted(h for h, _ in members) == sorted(zk), S,
                        f"{n}: TURNSTILE_ZK={zks} names exactly the ZooKeeper services")
            self.expect(all(m and zk_client.get(m[0]) == m[1] for m in members), S,
                        f"{n}: TURNSTILE_ZK uses each member's client port", f"client ports {zk_client}")
            replica_ids.append(self.flag_value("replica-id", env))
            hc = (s.get("healthcheck") or {}).get("test")
            if self.expect(isinstance(hc, list) and hc and hc[0] == "CMD", S, f"{n}: healthcheck in exec form"):
                self.check_health_cmd(S, f"{n} healthcheck", hc[1:], g)
            sg = s.get("stop_grace_period")
            drain = parse_duration_ms(self.flag_value("drain-timeout", env))
            try:
                sg_ms = parse_go_duration_ms(sg) if sg is not None else 10000
            except ValueError:
                sg_ms = 0
            self.expect(drain is not None and sg_ms >= drain + DRAIN_MARGIN_MS, S,
                        f"{n}: stop_grace_period {sg} exceeds the drain timeout ({drain}ms) by {DRAIN_MARGIN_MS}ms")
            deps = s.get("depends_on") or {}
            deps = set(deps.keys() if isinstance(deps, dict) else deps)
            self.expect(set(zk) <= deps, S, f"{n}: depends on the ZooKeeper services")
        self.expect(len(set(replica_ids)) == len(replica_ids), S, f"replica ids are distinct ({replica_ids})")

        # Published ports: 127.0.0.1 only, unique, onto ports the service serves.
        published = {}
        for n, s in services.items():
            serves = set()
            if n in ts:
                serves = set(ts_ports[n])
            elif n in zk:
                serves = {zk_client.get(n), zk_metrics.get(n)} | set(zk_ports.get(n, ()))
            elif n in prom:
                serves = {9090}
                for a in s.get("command") or []:
                    m = re.match(r"^--web\.listen-address=.*:(\d+)$", str(a))
                    if m:
                        serves = {int(m.group(1))}
            elif n in graf:
                serves = {int(envmap(s).get("GF_SERVER_HTTP_PORT", 3000))}
            for p in s.get("ports") or []:
                if isinstance(p, dict):
                    ip, hport, cport = p.get("host_ip"), p.get("published"), p.get("target")
                    proto = p.get("protocol", "tcp")
                else:
                    p = str(p)
                    proto = "tcp"
                    if "/" in p:
                        p, proto = p.split("/", 1)
                    parts = p.rsplit(":", 2)
                    ip, hport, cport = (parts if len(parts) == 3 else [None] + parts if len(parts) == 2 else [None, None, parts[0]])
                self.expect(ip == "127.0.0.1", S, f"{n}: port {p} is published on 127.0.0.1 only")
                key = (ip, str(hport), proto)
                self.expect(hport is not None and key not in published, S,
                            f"{n}: host port {ip}:{hport} is unique", f"also used by {published.get(key)}")
                published[key] = n
                self.expect(cport is not None and int(cport) in serves, S,
                            f"{n}: published container port {cport} is one it serves {sorted(x for x in serves if x)}")
        self.compose = {"services": services, "zk": zk, "ts": ts, "published": published,
                        "ts_image": next(iter(ts_images)) if len(ts_images) == 1 else None}

        # Prometheus: config + rules mounted, targets == what serves metrics.
        for n, s in prom.items():
            cfg_c = "/etc/prometheus/prometheus.yml"
            for a in s.get("command") or []:
                if str(a).startswith("--config.file="):
                    cfg_c = str(a).split("=", 1)[1]
            cfg_h = host_path(s, cfg_c)
            if not self.expect(cfg_h and os.path.isfile(cfg_h), S, f"{n}: --config.file {cfg_c} is a mounted repo file"):
                continue
            self.expect(os.path.normpath(os.path.relpath(os.path.dirname(cfg_h), self.root)) == "deploy/prometheus", S,
                        f"{n}: the config comes from deploy/prometheus ({os.path.relpath(cfg_h, self.root)})")
            cfg = load_yaml_docs(cfg_h)[0]
            for rf in cfg.get("rule_files") or []:
                rc = rf if rf.startswith("/") else os.path.join(os.path.dirname(cfg_c), rf)
                rh = host_path(s, rc)
                self.expect(rh and os.path.isfile(rh), S, f"{n}: rule file {rf} is mounted at {rc}")
            jobs = {j.get("job_name"): j for j in cfg.get("scrape_configs") or []}
            want = {"turnstile": {f"{x}:{ts_ports[x][1]}" for x in ts},
                    "zookeeper": {f"{x}:{zk_metrics.get(x)}" for x in zk}}
            for job, w in want.items():
                got = set()
                for sc in (jobs.get(job) or {}).get("static_configs") or []:
                    got |= set(sc.get("targets") or [])
                self.expect(got == w, S, f"prometheus job {job!r} targets {sorted(got)} == services serving metrics {sorted(w)}")
            metrics_ports = {x: {ts_ports[x][1]} for x in ts}
            metrics_ports.update({x: {zk_metrics.get(x)} for x in zk})
            for job, j in jobs.items():
                for sc in j.get("static_configs") or []:
                    for t in sc.get("targets") or []:
                        hp = split_hostport(t)
                        if hp and hp[0] in ("localhost", "127.0.0.1"):
                            continue
                        self.expect(hp and hp[0] in metrics_ports and hp[1] in metrics_ports[hp[0]], S,
                                    f"prometheus job {job!r} target {t} is a compose service's metrics port")

        # Grafana: provisioning and dashboards line up with the mounts.
        for n, s in graf.items():
            e = envmap(s)
            prov = e.get("GF_PATHS_PROVISIONING", "/etc/grafana/provisioning")
            ds_dir = host_path(s, prov + "/datasources")
            db_dir = host_path(s, prov + "/dashboards")
            for what, d in (("datasources", ds_dir), ("dashboards", db_dir)):
                ok = d and os.path.isdir(d) and any(f.endswith((".yml", ".yaml")) for f in os.listdir(d))
                self.expect(ok, S, f"{n}: {prov}/{what} is mounted from a repo dir with provisioning files")
            if ds_dir and os.path.isdir(ds_dir):
                for f in sorted(os.listdir(ds_dir)):
                    if not f.endswith((".yml", ".yaml")):
                        continue
                    for ds in load_yaml_docs(os.path.join(ds_dir, f))[0].get("datasources") or []:
                        m = re.match(r"^https?://([^:/]+):(\d+)", str(ds.get("url", "")))
                        target = m and m.group(1) in prom and int(m.group(2)) == 9090
                        self.expect(target, S, f"{n}: datasource {ds.get('name')} url {ds.get('url')} is the Prometheus service")
            if db_dir and os.path.isdir(db_dir):
                for f in sorted(os.listdir(db_dir)):
                    if not f.endswith((".yml", ".yaml")):
                        continue
                    for pv in load_yaml_docs(os.path.join(db_dir, f))[0].get("providers") or []:
                        pth = (pv.get("options") or {}).get("path", "")
                        hd = host_path(s, pth)
                        jsons = [x for x in os.listdir(hd) if x.endswith(".json")] if hd and os.path.isdir(hd) else []
                        ok = bool(jsons)
                        for j in jsons:
                            try:
                                json.load(open(os.path.join(hd, j)))
                            except ValueError:
                                ok = False
                        self.expect(ok, S, f"{n}: dashboard provider path {pth} is mounted from a repo dir with dashboards {jsons}")
            home = e.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
            if home:
                hh = host_path(s, home)
                self.expect(hh and os.path.isfile(hh), S, f"{n}: home dashboard {home} is a mounted repo file")
            pw = e.get("GF_SECURITY_ADMIN_PASSWORD")
            self.expect(pw is None or pw.startswith("${"), S, f"{n}: no admin password written into the file")

    # =========================================================================
    def check_k8s(self):
        S = "k8s"
        kpath = self.path(KUSTOMIZATION)
        if not self.expect(os.path.isfile(kpath), S, f"{KUSTOMIZATION} exists"):
            return
        try:
            kust = load_yaml_docs(kpath)[0]
        except (yaml.YAMLError, IndexError) as e:
            self.fail(S, f"{KUSTOMIZATION} parses: {e}")
            return
        known = {"apiVersion", "kind", "namespace", "resources", "images", "labels", "commonLabels",
                 "commonAnnotations", "namePrefix", "nameSuffix", "patches", "configMapGenerator",
                 "secretGenerator", "generatorOptions", "replicas", "components"}
        self.expect(kust.get("apiVersion") == "kustomize.config.k8s.io/v1beta1" and kust.get("kind") == "Kustomization",
                    S, "kustomization.yaml is a kustomize.config.k8s.io/v1beta1 Kustomization")
        bad = [k for k in kust if k not in known]
        self.expect(not bad, S, "kustomization.yaml has only known keys", f"unknown: {bad}")
        ns = kust.get("namespace")
        self.expect(ns, S, f"kustomization sets the namespace ({ns})")
        res = kust.get("resources") or []
        self.expect(len(res) == len(set(res)), S, "kustomization resources are listed once each")
        files = sorted(f for f in os.listdir(self.path(K8S_DIR))
                       if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")
        self.expect(sorted(res) == files, S, f"kustomization lists every manifest in {K8S_DIR} ({len(files)})",
                    f"unlisted: {sorted(set(files) - set(res))}, missing: {sorted(set(res) - set(files))}")
        objs = []
        for f in res:
            p = os.path.join(self.path(K8S_DIR), f)
            if not os.path.isfile(p):
                continue
            try:
                docs = load_yaml_docs(p)
            except yaml.YAMLError as e:
                self.fail(S, f"{f} parses: {e}")
                continue
            for i, d in enumerate(docs):
                objs.append({"file": f, "index": i, "object": d})
        self.expect(objs, S, f"{len(objs)} objects in {len(res)} files")
        for o in objs:
            md = (o["object"] or {}).get("metadata") or {}
            self.expect(md.get("namespace") in (None, ns), S,
                        f"{o['file']}: {o['object'].get('kind')}/{md.get('name')} is in the kustomization namespace")
        self.check_k8s_schema(objs)

        by_kind = {}
        for o in objs:
            by_kind.setdefault(o["object"].get("kind"), []).append(o["object"])
        self.expect([n["metadata"]["name"] for n in by_kind.get("Namespace", [])] == [ns], S,
                    f"a Namespace manifest creates {ns}")
        # kustomize images transform
        img_map = {}
        for im in kust.get("images") or []:
            img_map[im.get("name")] = im

        def eff_image(ref):
            name, _, tag = ref.partition(":")
            im = img_map.get(name)
            if not im:
                return ref
            return f"{im.get('newName', name)}:{im.get('newTag', tag)}"
        all_images = [c.get("image", "").partition(":")[0]
                      for k in ("Deployment", "StatefulSet") for w in by_kind.get(k, [])
                      for c in w["spec"]["template"]["spec"].get("containers", [])]
        for name in img_map:
            self.expect(name in all_images, S, f"kustomization image {name} is used by a container")

        workloads = [w for k in ("Deployment", "StatefulSet") for w in by_kind.get(k, [])]

        def pod_labels(w):
            return ((w.get("spec", {}).get("template", {}).get("metadata") or {}).get("labels") or {})

        def containers(w):
            return w.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []

        def container_ports(w):
            out = {}
            for c in containers(w):
                for p in c.get("ports") or []:
                    out[p.get("containerPort")] = p.get("name")
            return out

        for w in workloads:
            wn = f"{w['kind']}/{w['metadata']['name']}"
            self.expect(selector_matches(w["spec"].get("selector"), pod_labels(w)), S,
                        f"{wn}: selector matches its pod template labels")
            for c in containers(w):
                ports = c.get("ports") or []
                names = [p.get("name") for p in ports if p.get("name")]
                nums = [p.get("containerPort") for p in ports]
                self.expect(len(names) == len(set(names)) and len(nums) == len(set(nums)), S,
                            f"{wn}/{c.get('name')}: container port names and numbers are unique")
                r = c.get("resources") or {}
                have_all = all((r.get(x) or {}).get(y) for x in ("requests", "limits") for y in ("cpu", "memory"))
                if self.expect(have_all, S, f"{wn}/{c.get('name')}: cpu and memory requests and limits set"):
                    self.expect(all(parse_quantity(r["requests"][y]) <= parse_quantity(r["limits"][y]) for y in ("cpu", "memory")),
                                S, f"{wn}/{c.get('name')}: requests <= limits")
            tspec = w["spec"]["template"]["spec"]
            for kind in ("podAntiAffinity",):
                aa = (tspec.get("affinity") or {}).get(kind) or {}
                terms = list(aa.get("requiredDuringSchedulingIgnoredDuringExecution") or []) + \
                    [t.get("podAffinityTerm") or {} for t in aa.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
                for t in terms:
                    self.expect(t.get("topologyKey") and selector_matches(t.get("labelSelector"), pod_labels(w)), S,
                                f"{wn}: anti-affinity term selects its own pods per {t.get('topologyKey')}")
            self.expect(tspec.get("enableServiceLinks") is False, S,
                        f"{wn}: enableServiceLinks false (no injected *_SERVICE_HOST/*_PORT variables)")

        def selected(selector, svc=True):
            f = service_selector_matches if svc else selector_matches
            return [w for w in workloads if f(selector, pod_labels(w))]

        services = by_kind.get("Service", [])
        for s in services:
            sn = f"Service/{s['metadata']['name']}"
            sel = selected(s["spec"].get("selector") or {})
            if not self.expect(len(sel) == 1, S, f"{sn}: selector matches the pods of exactly one workload",
                               f"matches {[w['metadata']['name'] for w in sel]}"):
                continue
            cports = container_ports(sel[0])
            for p in s["spec"].get("ports") or []:
                tp = p.get("targetPort", p.get("port"))
                ok = tp in cports.values() if isinstance(tp, str) else tp in cports
                self.expect(ok, S, f"{sn}: port {p.get('name')} targetPort {tp} is a container port of {sel[0]['metadata']['name']}")
        for pdb in by_kind.get("PodDisruptionBudget", []):
            sel = selected(pdb["spec"].get("selector"), svc=False)
            self.expect(len(sel) == 1, S, f"PodDisruptionBudget/{pdb['metadata']['name']}: selects the pods of exactly one workload",
                        f"matches {[w['metadata']['name'] for w in sel]}")

        # --- ZooKeeper StatefulSet (first: the Deployment's TURNSTILE_ZK refers to it) ---
        stss = [s for s in by_kind.get("StatefulSet", []) if any(ZK_IMAGE_RE.match(c.get("image", "")) for c in containers(s))]
        if self.expect(len(stss) == 1, S, "one ZooKeeper StatefulSet (official image, 3.8 line)"):
            self.check_zk_statefulset(stss[0], services, by_kind, ns, containers, container_ports, pod_labels, selected)
        # --- turnstile Deployment ---
        cms = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
        deps = [d for d in by_kind.get("Deployment", [])
                if any(eff_image(c.get("image", "")).partition(":")[0] == "turnstile" or
                       eff_image(c.get("image", "")) == self.compose.get("ts_image") for c in containers(d))]
        if self.expect(len(deps) == 1, S, "one turnstile Deployment"):
            self.check_turnstile_deployment(deps[0], cms, services, by_kind, ns, eff_image, containers,
                                            container_ports, pod_labels, selected)

    def check_k8s_schema(self, objs):
        S = "k8s-schema"
        if not self.node_modules or not self.schema_js:
            self.fail(S, "kubernetes-models not available")
            return
        payload = json.dumps(objs, sort_keys=True)
        cached = Checker._schema_cache.get(payload)
        if cached is None:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                f.write(payload)
                tmp = f.name
            try:
                cached = run(["node", self.schema_js, self.node_modules, tmp], env=dict(os.environ))
            finally:
                os.unlink(tmp)
            if cached[0] == 0:
                Checker._schema_cache[payload] = cached
        rc, out, err = cached
        if not self.expect(rc == 0, S, "kubernetes-models validator ran", err.strip()):
            return
        results = json.loads(out)
        self.expect(len(results) == len(objs), S, f"validated {len(results)} objects")
        for r in results:
            what = f"{r['file']}#{r['index']} {r['kind']}/{r['name']}"
            self.expect(not r["schemaErrors"], S, f"{what}: valid against {r['model']}", "; ".join(r["schemaErrors"]))
            self.expect(not r["unknownFields"], S, f"{what}: no field unknown to the schema",
                        f"unknown: {', '.join(r['unknownFields'])}")

    def check_turnstile_deployment(self, d, cms, services, by_kind, ns, eff_image, containers, container_ports,
                                   pod_labels, selected):
        S = "k8s"
        dn = f"Deployment/{d['metadata']['name']}"
        spec, tspec = d["spec"], d["spec"]["template"]["spec"]
        self.expect(spec.get("replicas") == 3, S, f"{dn}: 3 replicas (got {spec.get('replicas')})")
        cs = [c for c in containers(d) if eff_image(c.get("image", "")).partition(":")[0] == "turnstile"
              or eff_image(c.get("image", "")) == self.compose.get("ts_image")]
        c = cs[0]
        cn = f"{dn}/{c.get('name')}"
        if self.compose.get("ts_image"):
            self.expect(eff_image(c["image"]) == self.compose["ts_image"], S,
                        f"{cn}: image {eff_image(c['image'])} is the one docker-compose builds")
        self.expect(not c.get("command"), S, f"{cn}: runs the image's ENTRYPOINT (turnstiled)")
        # Effective environment: image ENV < envFrom ConfigMaps < env.
        env = dict(self.image.get("env", {}))
        set_vars = {}
        for ef in c.get("envFrom") or []:
            ref = ef.get("configMapRef")
            if not self.expect(ref and not ef.get("secretRef"), S, f"{cn}: envFrom imports a ConfigMap"):
                continue
            self.expect(not ef.get("prefix"), S, f"{cn}: envFrom has no prefix (keys are the variable names)")
            cm = cms.get(ref.get("name"))
            if not self.expect(cm is not None, S, f"{cn}: envFrom ConfigMap {ref.get('name')} is a manifest"):
                continue
            self.expect(not ref.get("optional"), S, f"{cn}: ConfigMap {ref.get('name')} is not optional")
            data = cm.get("data") or {}
            self.expect(all(k.startswith("TURNSTILE_") for k in data), S,
                        f"ConfigMap/{ref.get('name')}: every key is TURNSTILE_*", f"keys {sorted(data)}")
            for k, v in data.items():
                set_vars[k] = str(v)
        for e in c.get("env") or []:
            if "value" in e:
                set_vars[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef"):
                set_vars[e["name"]] = "pod-from-fieldref"
            else:
                set_vars[e["name"]] = e.get("value", "")
        env.update(set_vars)
        self.check_turnstile_env(S, f"{cn}: ConfigMap + env (over the image's)", set_vars, self.image.get("args", []) + list(c.get("args") or []))
        args = self.image.get("args", []) + list(c.get("args") or [])
        accepted, err = self.turnstiled_accepts({k: v for k, v in env.items() if k in self.flag_envs}, args)
        self.expect(accepted, S, f"{cn}: turnstiled accepts the effective configuration", err)
        g, m = self.check_listen(S, cn, env, args)
        cports = container_ports(d)
        self.expect(g in cports and m in cports, S, f"{cn}: gRPC {g} and metrics {m} listen ports are containerPorts {sorted(cports)}")
        self.expect(g == self.image.get("grpc_port") and m == self.image.get("metrics_port"), S,
                    f"{cn}: same ports as the image EXPOSEs")
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe) or {}
            gp = p.get("grpc") or {}
            self.expect(gp.get("port") == g and gp.get("port") in cports, S,
                        f"{cn}: {probe} is a native gRPC probe on the gRPC containerPort {g}", f"got {p}")
            if probe == "readinessProbe":
                self.expect(gp.get("service", "") == "", S,
                            f"{cn}: readinessProbe asks for the overall health (service \"\")")
            else:
                live = self.liveness_service()
                self.expect(live is not None and gp.get("service") == live, S,
                            f"{cn}: livenessProbe asks the service turnstiled keeps SERVING while it runs "
                            f"(kLivenessService {live!r} in server/replica.h)", f"got {gp.get('service')!r}")
        drain = parse_duration_ms(self.flag_value("drain-timeout", env))
        grace = tspec.get("terminationGracePeriodSeconds", 30)
        self.expect(drain is not None and grace * 1000 >= drain + DRAIN_MARGIN_MS, S,
                    f"{dn}: terminationGracePeriodSeconds {grace}s exceeds drain timeout "
                    f"{'?' if drain is None else f'{drain / 1000:g}'}s by {DRAIN_MARGIN_MS / 1000:g}s")
        # Security.
        psc, csc = tspec.get("securityContext") or {}, c.get("securityContext") or {}
        eff = dict(psc)
        eff.update(csc)
        self.expect(eff.get("runAsNonRoot") is True, S, f"{cn}: runAsNonRoot")
        self.expect(csc.get("readOnlyRootFilesystem") is True, S, f"{cn}: readOnlyRootFilesystem")
        self.expect(csc.get("allowPrivilegeEscalation") is False, S, f"{cn}: allowPrivilegeEscalation false")
        self.expect("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), S, f"{cn}: drops ALL capabilities")
        if "runAsUser" in eff:
            self.expect(eff["runAsUser"] == self.image.get("uid") and eff["runAsUser"] > 0, S,
                        f"{cn}: runAsUser {eff['runAsUser']} is the image's USER {self.image.get('uid')}")
        aa = (tspec.get("affinity") or {}).get("podAntiAffinity") or {}
        self.expect(aa.get("requiredDuringSchedulingIgnoredDuringExecution") or aa.get("preferredDuringSchedulingIgnoredDuringExecution"),
                    S, f"{dn}: has pod anti-affinity")
        ann = (d["spec"]["template"].get("metadata") or {}).get("annotations") or {}
        self.expect(ann.get("prometheus.io/scrape") == "true", S, f"{dn}: prometheus.io/scrape \"true\" on the pod template")
        self.expect(ann.get("prometheus.io/port") == str(m) and m in cports, S,
                    f"{dn}: prometheus.io/port {ann.get('prometheus.io/port')} == metrics containerPort {m}")
        self.expect(ann.get("prometheus.io/path", "/metrics") == "/metrics", S, f"{dn}: prometheus.io/path is /metrics")
        # Services: a ClusterIP and a headless one, on the gRPC port.
        mine = [s for s in services if service_selector_matches(s["spec"].get("selector") or {}, pod_labels(d))]
        headless = [s for s in mine if s["spec"].get("clusterIP") == "None"]
        cip = [s for s in mine if s["spec"].get("clusterIP") != "None" and s["spec"].get("type", "ClusterIP") == "ClusterIP"]
        grpc_name = cports.get(g)

        def serves_grpc(s):
            return any(p.get("targetPort", p.get("port")) in (g, grpc_name) for p in s["spec"].get("ports") or [])
        self.expect(any(serves_grpc(s) for s in cip), S, f"{dn}: a ClusterIP Service forwards to the gRPC port")
        self.expect(any(serves_grpc(s) and not s["spec"].get("publishNotReadyAddresses") for s in headless), S,
                    f"{dn}: a headless Service (ready pods only) forwards to the gRPC port")
        pdbs = [p for p in by_kind.get("PodDisruptionBudget", [])
                if selector_matches(p["spec"].get("selector"), pod_labels(d))]
        if self.expect(len(pdbs) == 1, S, f"{dn}: one PodDisruptionBudget"):
            ps = pdbs[0]["spec"]
            allowed = ps.get("maxUnavailable") if "maxUnavailable" in ps else d["spec"].get("replicas", 1) - ps.get("minAvailable", 0)
            self.expect(isinstance(allowed, int) and 1 <= allowed < d["spec"].get("replicas", 1), S,
                        f"{dn}: PDB lets drains proceed one at a time and keeps others serving (allowed {allowed})")
        # TURNSTILE_ZK names the ZooKeeper client Service and its port, in this namespace.
        zks = self.flag_value("zk", env)
        members = [split_hostport(p) for p in zks.split("/", 1)[0].split(",")]
        svc_by_name = {s["metadata"]["name"]: s for s in services}
        ok = bool(members) and all(members)
        for hp in members if ok else []:
            host, port = hp
            m2 = re.match(r"^([a-z0-9-]+)(?:\.([a-z0-9-]+)(?:\.svc(?:\.cluster\.local)?)?)?$", host)
            s = svc_by_name.get(m2.group(1)) if m2 else None
            if not (m2 and s and (m2.group(2) in (None, ns))):
                ok = False
                continue
            sel = [w for w in selected(s["spec"].get("selector") or {})]
            is_zk = sel and any(ZK_IMAGE_RE.match(x.get("image", "")) for x in containers(sel[0]))
            port_ok = False
            for p in s["spec"].get("ports") or []:
                if p.get("port") == port and is_zk:
                    tp = p.get("targetPort", port)
                    zc = container_ports(sel[0])
                    tnum = tp if isinstance(tp, int) else next((k for k, v in zc.items() if v == tp), None)
                    port_ok = tnum == self._zk_client_port
            ok = ok and port_ok
        self.expect(ok, S, f"{cn}: TURNSTILE_ZK={zks} is the ZooKeeper client Service at its client port, in namespace {ns}")

    _zk_client_port = None

    def check_zk_statefulset(self, st, services, by_kind, ns, containers, container_ports, pod_labels, selected):
        S = "k8s"
        sn = f"StatefulSet/{st['metadata']['name']}"
        spec, tspec = st["spec"], st["spec"]["template"]["spec"]
        replicas = spec.get("replicas")
        self.expect(replicas == 3, S, f"{sn}: 3 replicas (got {replicas})")
        self.expect(spec.get("podManagementPolicy") == "Parallel", S,
                    f"{sn}: podManagementPolicy Parallel (a lone member never gets ready, OrderedReady would wait for ever)")
        svc_by_name = {s["metadata"]["name"]: s for s in services}
        gov = svc_by_name.get(spec.get("serviceName"))
        if self.expect(gov is not None, S, f"{sn}: serviceName {spec.get('serviceName')} is a Service"):
            self.expect(gov["spec"].get("clusterIP") == "None", S, f"{sn}: governing Service is headless")
            self.expect(gov["spec"].get("publishNotReadyAddresses") is True, S,
                        f"{sn}: governing Service publishes not-ready members (needed to form the quorum)")
            self.expect(service_selector_matches(gov["spec"].get("selector") or {}, pod_labels(st)), S,
                        f"{sn}: governing Service selects its pods")
        vcts = [v["metadata"]["name"] for v in spec.get("volumeClaimTemplates") or []]
        self.expect(vcts, S, f"{sn}: persistent volumes (volumeClaimTemplates {vcts})")
        aa = (tspec.get("affinity") or {}).get("podAntiAffinity") or {}
        req = aa.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        self.expect(req and all(selector_matches(t.get("labelSelector"), pod_labels(st)) and t.get("topologyKey")
                                for t in req), S, f"{sn}: required anti-affinity selects its own pods")
        pdbs = [p for p in by_kind.get("PodDisruptionBudget", [])
                if selector_matches(p["spec"].get("selector"), pod_labels(st))]
        self.expect(len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == 1 and "minAvailable" not in pdbs[0]["spec"],
                    S, f"{sn}: PodDisruptionBudget maxUnavailable 1")
        c = next(x for x in containers(st) if ZK_IMAGE_RE.match(x.get("image", "")))
        cn = f"{sn}/{c.get('name')}"
        env = {e["name"]: str(e.get("value", "")) for e in c.get("env") or []}
        script = " ".join(list(c.get("command") or []) + list(c.get("args") or []))
        self.expect(re.search(r"ZOO_MY_ID=\$\(\(\s*\$\{HOSTNAME##\*-\}\s*\+\s*1\s*\)\)", script), S,
                    f"{cn}: ZOO_MY_ID is the pod ordinal + 1")
        self.expect(re.search(r"exec\s+/docker-entrypoint\.sh\s+zkServer\.sh\s+start-foreground", script), S,
                    f"{cn}: runs the image's entrypoint with zkServer.sh start-foreground")
        cports = container_ports(st)
        entries, bad = parse_zoo_servers(env.get("ZOO_SERVERS", ""))
        for tok in bad:
            self.fail(S, f"{cn}: ZOO_SERVERS entry {tok!r} is server.N=host:quorum:election;clientPort")
        entries = {sid: (h, q, e, cp or 0) for sid, (h, q, e, cp) in entries.items()}
        name, gsvc = st["metadata"]["name"], spec.get("serviceName")
        ok = sorted(entries) == list(range(1, (replicas or 0) + 1))
        for sid, (host, q, e, cp) in entries.items():
            m = re.match(r"^" + re.escape(f"{name}-{sid - 1}.{gsvc}") + r"(?:\.([a-z0-9-]+)(?:\.svc(?:\.cluster\.local)?)?)?$", host)
            ok = ok and bool(m) and m.group(1) in (None, ns)
        self.expect(ok, S, f"{cn}: ZOO_SERVERS is server.N+1={name}-N.{gsvc}:... for every ordinal N < {replicas}",
                    f"got {env.get('ZOO_SERVERS')}")
        ports = {(q, e, cp) for _, q, e, cp in entries.values()}
        if self.expect(len(ports) == 1, S, f"{cn}: members use the same ports"):
            q, e, cp = next(iter(ports))
            self.expect(q in cports and e in cports and cp in cports, S,
                        f"{cn}: quorum {q}, election {e}, client {cp} ports are containerPorts")
            gports = {p.get("port") for p in (gov or {}).get("spec", {}).get("ports") or []}
            self.expect({q, e} <= gports, S, f"{sn}: the headless Service carries the quorum and election ports")
            self._zk_client_port = cp
        extra = zoo_cfg_extra(env.get("ZOO_CFG_EXTRA", ""))
        mp = extra.get("metricsProvider.httpPort", "")
        self.expect(extra.get("metricsProvider.className") == PROMETHEUS_PROVIDER and mp.isdigit() and int(mp) in cports, S,
                    f"{cn}: Prometheus metrics provider on containerPort {mp}")
        ann = (st["spec"]["template"].get("metadata") or {}).get("annotations") or {}
        self.expect(ann.get("prometheus.io/port") == mp and ann.get("prometheus.io/scrape") == "true", S,
                    f"{sn}: scrape annotations name the metrics port {mp}")
        mounts = {vm.get("mountPath"): vm.get("name") for vm in c.get("volumeMounts") or []}
        for var, default in (("ZOO_DATA_DIR", "/data"), ("ZOO_DATA_LOG_DIR", "/datalog")):
            d = env.get(var, default)
            on_pv = any(mounts[mp2] in vcts and (d == mp2 or d.startswith(mp2.rstrip("/") + "/")) for mp2 in mounts)
            self.expect(on_pv, S, f"{cn}: {var}={d} is on a persistent volume")
        psc = tspec.get("securityContext") or {}
        csc = c.get("securityContext") or {}
        self.expect({**psc, **csc}.get("runAsNonRoot") is True and csc.get("allowPrivilegeEscalation") is False, S,
                    f"{cn}: non-root, no privilege escalation")
        for probe in ("readinessProbe", "livenessProbe"):
            cmd = ((c.get(probe) or {}).get("exec") or {}).get("command") or []
            ok, uses, allowed = four_letter_words_ok(cmd, env, self._zk_client_port)
            self.expect(ok, S, f"{cn}: {probe} asks whitelisted four-letter words {uses} on the client port",
                        f"whitelist {allowed}, client port {self._zk_client_port}")

    def liveness_service(self):
        """The grpc.health.v1 service name turnstiled keeps SERVING while the
        process runs (server/replica.h kLivenessService), or None."""
        try:
            with open(self.path("server/replica.h")) as f:
                m = re.search(r'kLivenessService\[\]\s*=\s*"([^"]*)"', f.read())
        except OSError:
            return None
        return m.group(1) if m else None

    # =========================================================================
    def check_readme(self):
        S = "readme"
        p = self.path("README.md")
        if not self.expect(os.path.isfile(p), S, "README.md exists"):
            return
        text = open(p, encoding="utf-8").read()
        heads = re.findall(r"^## (.+)$", text, re.M)
        for h in ("Try it with docker-compose", "Deploy on Kubernetes"):
            self.expect(h in heads, S, f"README has section \"{h}\"")
        if all(h in heads for h in ("Operating turnstile", "Try it with docker-compose", "Deploy on Kubernetes", "Limits and codes")):
            self.expect(heads.index("Operating turnstile") < heads.index("Try it with docker-compose") <
                        heads.index("Deploy on Kubernetes") < heads.index("Limits and codes"), S,
                        "the sections sit between \"Operating turnstile\" and \"Limits and codes\"")
        self.expect("docker compose up -d --build" in text and "kubectl apply -k deploy/k8s" in text, S,
                    "README gives the compose and kubectl commands")
        self.expect("tests/check_deploy.sh" in text, S, "README says the deployment files are checked by tests/check_deploy.sh")
        self.expect(BUILD_LIST in text, S, f"README set-up names {BUILD_LIST}")
        for f in ("tests/run.sh", "deploy/local/quickstart.sh"):
            t = open(self.path(f)).read() if os.path.isfile(self.path(f)) else ""
            self.expect("install-deps.sh" in t, S, f"{f} (README set-up) installs through install-deps.sh")
        services = self.compose.get("services") or {}
        for svc in sorted(set(re.findall(r"docker compose exec (?:-\S+ )*([a-z0-9-]+)", text))):
            self.expect(svc in services, S, f"README's `docker compose exec {svc}` names a compose service")
        published = {int(h) for (_, h, _) in self.compose.get("published", {})}
        for port in sorted({int(x) for x in re.findall(r"http://127\.0\.0\.1:(\d+)", text)}):
            self.expect(port in published, S, f"README's http://127.0.0.1:{port} is a published compose port")
        layout = text.split("## Layout", 1)[-1]
        for item in ("docker-compose.yml", "(`docker/`", "(`k8s/`", "`check_deploy.sh`"):
            self.expect(item in layout, S, f"Layout mentions {item}")

    def run_all(self):
        for title, section, fn in (("Dockerfile", "dockerfile", self.check_dockerfile),
                                   ("docker-compose.yml", "compose", self.check_compose),
                                   ("deploy/k8s", "k8s", self.check_k8s),
                                   ("README", "readme", self.check_readme)):
            if not self.quiet:
                print(f"== {title}")
            try:
                fn()
            except Exception as e:  # a file so broken that a check could not finish
                self.fail(section, f"checks stopped early: {type(e).__name__}: {e}")
        return not self.failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--turnstiled", required=True)
    ap.add_argument("--turnstile", required=True)
    ap.add_argument("--node-modules", required=True)
    ap.add_argument("--facts-out", help="write the binary facts (JSON) here")
    a = ap.parse_args()
    facts = binary_facts(a.turnstiled, a.turnstile)
    if a.facts_out:
        json.dump(facts, open(a.facts_out, "w"), indent=1)
    print(f"turnstiled: {len(facts['flags'])} flags; turnstile CLI: commands {facts['cli_commands']}; "
          f"{len(facts['needed'])} NEEDED libraries")
    schema_js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_k8s_schema.js")
    ch = Checker(a.root, facts, a.node_modules, schema_js)
    ch.run_all()
    total = sum(ch.passed.values())
    print("check_deploy: " + ", ".join(f"{k} {v}" for k, v in ch.passed.items()) + " checks passed")
    if ch.failed:
        print(f"check_deploy: {len(ch.failed)} FAILED:")
        for f in ch.failed:
            print(f"FAIL: {f}")
    print(f"{total} passed, {len(ch.failed)} failed")
    return 1 if ch.failed else 0


if __name__ == "__main__":
    sys.exit(main())
