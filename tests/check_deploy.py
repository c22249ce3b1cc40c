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
  pki         deploy/local/make-dev-ca.sh, run in a temp dir: CA, server and
              client certificates chain to the CA (openssl verify), EC P-256,
              keys mode 600, serverAuth/clientAuth, client URI SAN = identity
              and file name = its slug; idempotent (a rerun keeps the CA, a new
              identity is issued by it), --force replaces it, bad identities
              are refused; its output directory is git- and docker-ignored.
  compose-mtls  deploy/compose/mtls.override.yml merged over docker-compose.yml
              (compose's merge rules), then every compose rule again, plus:
              TLS/authz variables set and complete, each file resolves through
              the mounts to make-dev-ca.sh's output (copied into a volume by a
              one-shot service that never copies ca.key and chowns to the
              image's uid) or to a valid policy in the repo; health checks
              present a client certificate; server.crt names every replica.
  k8s-mtls    deploy/k8s-mtls rendered like kustomize (and compared with
              `kubectl kustomize` when installed), then every k8s rule again
              with exec probes, plus: cert-manager.io/v1 objects against their
              schema (required and known fields), issuerRefs, the CA chain,
              mounted Secrets == Certificate secretNames, env file paths ==
              mount paths, server dnsNames cover the Services, client
              certificates of the trusted CA, probes with a client
              certificate, the policy ConfigMap valid and kept by name.
              Policies: fields and actions of protos/turnstile/v1/authz.proto
              (the rules of AuthzPolicy::Parse in server/rpc/authz.cc).
  readme      the README sections exist and name real services, ports, paths.

The same check functions run against mutated copies in
tests/check_deploy_mutations.py, which proves that each rule catches a break.
"""

import argparse
import copy
import fnmatch
import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
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
# Issue 13 (mutual TLS + authorization), all optional modes of the above:
K8S_MTLS_DIR = "deploy/k8s-mtls"
COMPOSE_MTLS = "deploy/compose/mtls.override.yml"
MAKE_DEV_CA = "deploy/local/make-dev-ca.sh"
DEV_PKI_DIR = "deploy/local/dev-pki"  # make-dev-ca.sh's output in the README; never committed

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


_yaml_cache = {}  # file text -> parsed documents (the mutation runs parse the same files ~170 times)


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text not in _yaml_cache:
        try:
            _yaml_cache[text] = [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]
        except yaml.YAMLError as e:
            _yaml_cache[text] = e
    docs = _yaml_cache[text]
    if isinstance(docs, Exception):
        raise docs
    return copy.deepcopy(docs)


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


_help_cache = {}  # (argv, env) -> result of a `... --help` run of the built binaries (deterministic)


def run_help(cmd, env):
    key = (tuple(cmd), tuple(sorted(env.items())))
    if key not in _help_cache:
        _help_cache[key] = run(cmd, env=env)
    return _help_cache[key]


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
    """turnstiled's duration syntax (client/common/flags.cc): 500ms, 10s, 2m, 1h; bare = seconds.
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
# Mutual TLS and authorization (deploy/compose/mtls.override.yml,
# deploy/k8s-mtls/, deploy/local/make-dev-ca.sh).

AUTHZ_ACTIONS = ("acquire", "describe", "list", "release", "revoke", "keepalive")
AUTHZ_RULE_FIELDS = {"identities", "locks", "actions", "admin", "deny", "description"}
TLS_FILE_ENVS = ("TURNSTILE_TLS_CERT_FILE", "TURNSTILE_TLS_KEY_FILE", "TURNSTILE_TLS_CLIENT_CA_FILE",
                 "TURNSTILE_AUTHZ_FILE")
TLS_CLI_FLAGS = ("tls-ca-file", "tls-cert-file", "tls-key-file")


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"duplicate key(s) {dup}")
    return dict(pairs)


def parse_policy(text):
    """An --authz-file policy read the way turnstiled reads it (AuthzPolicy::Parse in
    server/rpc/authz.cc; format in protos/turnstile/v1/authz.proto): (rules, problems)."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except ValueError as e:
        return None, [f"parses as JSON: {e}"]
    if not isinstance(doc, dict):
        return None, ["is a JSON object {\"rules\": [...]}"]
    problems = [f"unknown field {k!r} (only \"rules\")" for k in doc if k != "rules"]
    rules = doc.get("rules")
    if rules is None:
        rules = []
    if not isinstance(rules, list):
        return None, problems + ["\"rules\" is a list"]
    out = []
    for i, r in enumerate(rules, 1):
        lab = f"rule {i}"
        if not isinstance(r, dict):
            problems.append(f"{lab} is an object")
            continue
        problems += [f"{lab}: unknown field {k!r} (known: {', '.join(sorted(AUTHZ_RULE_FIELDS))})"
                     for k in r if k not in AUTHZ_RULE_FIELDS]
        ids, locks, actions = r.get("identities") or [], r.get("locks") or [], r.get("actions") or []
        for f, v in (("identities", ids), ("locks", locks), ("actions", actions)):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                problems.append(f"{lab}: \"{f}\" is a list of strings")
        for f in ("admin", "deny"):
            if f in r and not isinstance(r[f], bool):
                problems.append(f"{lab}: \"{f}\" is true or false")
        if "description" in r and not isinstance(r["description"], str):
            problems.append(f"{lab}: \"description\" is a string")
        if not ids:
            problems.append(f"{lab}: \"identities\" is empty")
        if any(x == "" for x in ids if isinstance(x, str)):
            problems.append(f"{lab}: an empty identity pattern (use \"*\" for anyone)")
        if not locks:
            problems.append(f"{lab}: \"locks\" is empty (\"\" means every lock)")
        acts = set()
        for a in actions if isinstance(actions, list) else []:
            if a == "*":
                acts |= set(AUTHZ_ACTIONS)
            elif a in AUTHZ_ACTIONS:
                acts.add(a)
            else:
                problems.append(f"{lab}: unknown action {a!r} (known: {', '.join(AUTHZ_ACTIONS)}, *)")
        if r.get("admin") is True:
            acts = set(AUTHZ_ACTIONS)
        deny = r.get("deny") is True
        if deny and (r.get("admin") is True or actions):
            problems.append(f"{lab}: a deny rule refuses every action; it takes no actions or admin")
        if not deny and not acts:
            problems.append(f"{lab}: grants nothing (give actions, admin, or deny)")
        out.append({"identities": [x for x in ids if isinstance(x, str)],
                    "locks": [x for x in locks if isinstance(x, str)], "actions": acts, "deny": deny})
    return out, problems


def identity_matches(pattern, identity):
    """turnstiled's IdentityMatches: '*' is any run of characters ('/' included)."""
    rx = ".*".join(re.escape(p) for p in pattern.split("*"))
    return re.fullmatch(rx, identity, re.S) is not None


def policy_allows(rules, identity, action, lock):
    """AuthzPolicy::Check: the most specific matching rule decides (identity
    exact > more literal glob characters, then longer lock prefix, then deny)."""
    best, best_key = None, None
    for r in rules:
        spec = -1
        for pat in r["identities"]:
            if identity_matches(pat, identity):
                spec = max(spec, 10 ** 9 if "*" not in pat else len(pat) - pat.count("*"))
        if spec < 0:
            continue
        lens = [len(p) for p in r["locks"] if lock.startswith(p)]
        if not lens:
            continue
        key = (spec, max(lens), r["deny"])
        if best is None or key > best_key:
            best, best_key = r, key
    return best is not None and not best["deny"] and action in best["actions"]


def tls_dependency_problems(env):
    """turnstiled's start-up rules (server/replica.cc) for the TLS/authz flags."""
    has = {k: bool(env.get(k)) for k in TLS_FILE_ENVS}
    out = []
    if has["TURNSTILE_AUTHZ_FILE"] and not has["TURNSTILE_TLS_CLIENT_CA_FILE"]:
        out.append("--authz-file needs --tls-client-ca-file (identities come from client certificates)")
    if has["TURNSTILE_TLS_CLIENT_CA_FILE"] and not (has["TURNSTILE_TLS_CERT_FILE"] and has["TURNSTILE_TLS_KEY_FILE"]):
        out.append("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
    if has["TURNSTILE_TLS_CERT_FILE"] != has["TURNSTILE_TLS_KEY_FILE"]:
        out.append("--tls-cert-file and --tls-key-file go together")
    return out


def cli_global_flags(argv):
    """`turnstile --flag value ... COMMAND args`: ({flag: value}, [COMMAND, args...])."""
    flags, i = {}, 1
    while i < len(argv) and argv[i].startswith("--"):
        if "=" in argv[i]:
            k, v = argv[i][2:].split("=", 1)
            i += 1
        else:
            k, v = argv[i][2:], argv[i + 1] if i + 1 < len(argv) else None
            i += 2
        flags[k] = v
    return flags, list(argv[i:])


# --- a small kustomize (what deploy/k8s and deploy/k8s-mtls use) --------------

SMP_MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
                  "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
                  "CustomResourceDefinition", "PriorityClass", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration"}
KUSTOMIZE_SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "images", "patches",
                       "configMapGenerator", "generatorOptions"}


def smp_merge(dst, patch):
    """Strategic merge patch: maps merge, null deletes, the usual Kubernetes
    lists merge by their key (containers/volumes/env by name, volumeMounts by
    mountPath), other lists are replaced."""
    if not isinstance(dst, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(dst)
    for k, v in patch.items():
        if str(k).startswith("$"):
            raise ValueError(f"patch directive {k} is not supported by this check")
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = smp_merge(out[k], v)
        elif isinstance(v, list) and isinstance(out.get(k), list) and k in SMP_MERGE_KEYS:
            mk = SMP_MERGE_KEYS[k]
            old = {i.get(mk): i for i in out[k] if isinstance(i, dict)}
            merged, used = [], set()
            for item in v:
                key = item.get(mk) if isinstance(item, dict) else None
                if key is not None and key in old:
                    merged.append(smp_merge(old[key], item))
                    used.add(key)
                else:
                    merged.append(copy.deepcopy(item))
            merged += [copy.deepcopy(i) for i in out[k] if not (isinstance(i, dict) and i.get(mk) in used)]
            out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    return out


def render_kustomization(root, rel_dir, _stack=()):
    """Renders a kustomization like `kustomize build` for the features these
    manifests use: resources (files and directories), configMapGenerator,
    strategic-merge patches (matched by kind and name), namespace, images.
    Returns (objects [{"file", "index", "object"}], kustomization, problems)."""
    d = os.path.normpath(rel_dir)
    if d in _stack:
        return [], None, [f"kustomization cycle: {' -> '.join(_stack + (d,))}"]
    kp = os.path.join(root, d, "kustomization.yaml")
    if not os.path.isfile(kp):
        return [], None, [f"{d}/kustomization.yaml is missing"]
    try:
        kust = load_yaml_docs(kp)[0]
    except (yaml.YAMLError, IndexError) as e:
        return [], None, [f"{d}/kustomization.yaml parses: {e}"]
    problems = [f"{d}/kustomization.yaml: {k} is not supported by this check's renderer"
                for k in kust if k not in KUSTOMIZE_SUPPORTED]
    objs = []
    for r in kust.get("resources") or []:
        rp = os.path.normpath(os.path.join(d, str(r)))
        full = os.path.join(root, rp)
        if rp.startswith(".."):
            problems.append(f"{d}: resource {r} is outside the repository")
        elif os.path.isdir(full):
            sub, _, pr = render_kustomization(root, rp, _stack + (d,))
            objs += sub
            problems += pr
        elif os.path.isfile(full):
            try:
                objs += [{"file": rp, "index": i, "object": o} for i, o in enumerate(load_yaml_docs(full))]
            except yaml.YAMLError as e:
                problems.append(f"{rp} parses: {e}")
        else:
            problems.append(f"{d}: resource {r} exists")
    gen_opts = kust.get("generatorOptions") or {}
    for g in kust.get("configMapGenerator") or []:
        data = {}
        for f in g.get("files") or []:
            key, _, fp = str(f).partition("=") if "=" in str(f) else (os.path.basename(str(f)), "", str(f))
            try:
                data[key] = open(os.path.join(root, d, fp), encoding="utf-8").read()
            except OSError as e:
                problems.append(f"{d}: configMapGenerator {g.get('name')} file {fp}: {e.strerror}")
        for lit in g.get("literals") or []:
            k, _, v = str(lit).partition("=")
            data[k] = v
        opts = dict(gen_opts)
        opts.update(g.get("options") or {})
        md = {"name": str(g.get("name")) + ("" if opts.get("disableNameSuffixHash") else "-HASH")}
        if opts.get("labels"):
            md["labels"] = dict(opts["labels"])
        if opts.get("annotations"):
            md["annotations"] = dict(opts["annotations"])
        objs.append({"file": f"{d}/kustomization.yaml", "index": f"configMapGenerator {g.get('name')}",
                     "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}})
    for p in kust.get("patches") or []:
        if not isinstance(p, dict) or p.get("target") or ("path" in p) == ("patch" in p):
            problems.append(f"{d}: patch {p} is a strategic-merge patch given by path or patch, without target")
            continue
        try:
            docs = load_yaml_docs(os.path.join(root, d, p["path"])) if "path" in p else \
                [x for x in yaml.load_all(p["patch"], Loader=StrictLoader) if x is not None]
        except (OSError, yaml.YAMLError) as e:
            problems.append(f"{d}: patch {p.get('path', '(inline)')} loads: {e}")
            continue
        for pd in docs:
            if not isinstance(pd, dict) or not pd.get("kind") or not (pd.get("metadata") or {}).get("name"):
                problems.append(f"{d}: patch {p.get('path', '(inline)')} is a strategic-merge patch with kind and metadata.name")
                continue
            hits = [o for o in objs if o["object"].get("kind") == pd["kind"]
                    and (o["object"].get("metadata") or {}).get("name") == pd["metadata"]["name"]]
            if not hits:
                problems.append(f"patch {p.get('path', '(inline)')} targets {pd['kind']}/{pd['metadata']['name']}, "
                                f"which is no object of the kustomization")
            for o in hits:
                try:
                    o["object"] = smp_merge(o["object"], pd)
                except ValueError as e:
                    problems.append(f"patch {p.get('path', '(inline)')}: {e}")
    ns = kust.get("namespace")
    if ns:
        for o in objs:
            if o["object"].get("kind") not in CLUSTER_SCOPED:
                o["object"].setdefault("metadata", {})["namespace"] = ns
    images = {im.get("name"): im for im in kust.get("images") or []}
    for o in objs:
        tspec = (((o["object"].get("spec") or {}).get("template") or {}).get("spec") or {})
        for c in list(tspec.get("containers") or []) + list(tspec.get("initContainers") or []):
            name, _, tag = str(c.get("image", "")).partition(":")
            im = images.get(name)
            if im:
                c["image"] = f"{im.get('newName', name)}:{im.get('newTag', tag)}"
    return objs, kust, problems


def canonical(obj):
    """JSON text of an object with the merge-keyed lists sorted (list order of
    containers, env, volumes... does not matter to Kubernetes)."""
    def canon(v):
        if isinstance(v, dict):
            return {k: canon(x) for k, x in v.items()}
        if isinstance(v, list):
            items = [canon(x) for x in v]
            for mk in ("name", "mountPath", "containerPort"):
                if items and all(isinstance(x, dict) and mk in x for x in items):
                    return sorted(items, key=lambda x: json.dumps(x[mk]))
            return items
        return v
    return json.dumps(canon(obj), sort_keys=True)


# --- cert-manager.io/v1 (CRDs: kubernetes-models does not know them) ----------

CM_CERT_SPEC = {"secretName", "issuerRef", "commonName", "dnsNames", "uris", "ipAddresses", "emailAddresses",
                "isCA", "duration", "renewBefore", "renewBeforePercentage", "usages", "privateKey", "subject",
                "literalSubject", "secretTemplate", "revisionHistoryLimit", "keystores", "encodeUsagesInRequest",
                "additionalOutputFormats", "nameConstraints", "otherNames"}
CM_USAGES = {"signing", "digital signature", "content commitment", "key encipherment", "key agreement",
             "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
             "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
             "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"}
CM_ISSUER_TYPES = {"selfSigned": {"crlDistributionPoints"},
                   "ca": {"secretName", "crlDistributionPoints", "ocspServers", "issuingCertificateURLs"},
                   "acme": None, "vault": None, "venafi": None}
DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s/]+(/\S*)?$")


def cert_manager_problems(o):
    """Schema problems of a cert-manager.io/v1 Certificate/Issuer/ClusterIssuer
    (required fields, known fields, value formats)."""
    out = []
    kind, md, spec = o.get("kind"), o.get("metadata") or {}, o.get("spec")
    if o.get("apiVersion") != "cert-manager.io/v1":
        out.append(f"apiVersion {o.get('apiVersion')} is cert-manager.io/v1")
    out += [f"unknown field {k}" for k in o if k not in ("apiVersion", "kind", "metadata", "spec")]
    out += [f"unknown field metadata.{k}" for k in md if k not in ("name", "namespace", "labels", "annotations")]
    if not DNS1123_SUB.match(str(md.get("name", ""))):
        out.append("metadata.name is a DNS-1123 name")
    if not isinstance(spec, dict):
        return out + ["spec is an object"]
    if kind == "Certificate":
        out += [f"unknown field spec.{k}" for k in spec if k not in CM_CERT_SPEC]
        if not isinstance(spec.get("secretName"), str) or not DNS1123_SUB.match(spec.get("secretName") or ""):
            out.append("spec.secretName (required) is a Secret name")
        ref = spec.get("issuerRef")
        if not isinstance(ref, dict):
            out.append("spec.issuerRef (required) is an object")
        else:
            out += [f"unknown field spec.issuerRef.{k}" for k in ref if k not in ("name", "kind", "group")]
            if not ref.get("name"):
                out.append("spec.issuerRef.name is required")
            if ref.get("kind") not in ("Issuer", "ClusterIssuer"):
                out.append(f"spec.issuerRef.kind is Issuer or ClusterIssuer (got {ref.get('kind')!r})")
            if ref.get("group", "cert-manager.io") != "cert-manager.io":
                out.append("spec.issuerRef.group is cert-manager.io")
        if spec.get("isCA") is True:
            if not spec.get("commonName"):
                out.append("a CA certificate (isCA) has a commonName")
        elif not (spec.get("dnsNames") or spec.get("uris") or spec.get("ipAddresses")):
            out.append("spec.dnsNames or spec.uris (or ipAddresses) names the certificate's subject")
        if "isCA" in spec and not isinstance(spec["isCA"], bool):
            out.append("spec.isCA is true or false")
        for f in ("dnsNames", "uris", "ipAddresses", "usages"):
            if f in spec and not (isinstance(spec[f], list) and all(isinstance(x, str) for x in spec[f])):
                out.append(f"spec.{f} is a list of strings")
        for n in spec.get("dnsNames") or []:
            if not (n == "localhost" or DNS1123_SUB.match(str(n).lstrip("*."))):
                out.append(f"spec.dnsNames: {n!r} is a DNS name")
        for u in spec.get("uris") or []:
            if not URI_RE.match(str(u)):
                out.append(f"spec.uris: {u!r} is a URI (scheme://authority/path)")
        for ip in spec.get("ipAddresses") or []:
            try:
                ipaddress.ip_address(str(ip))
            except ValueError:
                out.append(f"spec.ipAddresses: {ip!r} is an IP address")
        bad = [u for u in spec.get("usages") or [] if u not in CM_USAGES]
        if bad:
            out.append(f"spec.usages: unknown {bad}")
        if len(str(spec.get("commonName", ""))) > 64:
            out.append("spec.commonName is at most 64 characters")
        pk = spec.get("privateKey") or {}
        out += [f"unknown field spec.privateKey.{k}" for k in pk if k not in ("algorithm", "size", "encoding", "rotationPolicy")]
        alg, size = pk.get("algorithm", "RSA"), pk.get("size")
        if alg not in ("RSA", "ECDSA", "Ed25519"):
            out.append(f"spec.privateKey.algorithm {alg!r} is RSA, ECDSA or Ed25519")
        elif size is not None and ((alg == "ECDSA" and size not in (256, 384, 521)) or (alg == "RSA" and (not isinstance(size, int) or size < 2048))):
            out.append(f"spec.privateKey.size {size} fits algorithm {alg}")
        if pk.get("rotationPolicy", "Never") not in ("Never", "Always"):
            out.append("spec.privateKey.rotationPolicy is Never or Always")
        try:
            dur = parse_go_duration_ms(spec["duration"]) if "duration" in spec else 90 * 24 * 3600e3
            ren = parse_go_duration_ms(spec["renewBefore"]) if "renewBefore" in spec else dur / 3
            if dur < 3600e3:
                out.append("spec.duration is at least 1h")
            if not 0 < ren < dur:
                out.append(f"spec.renewBefore {spec.get('renewBefore')} is shorter than spec.duration {spec.get('duration')}")
        except ValueError as e:
            out.append(f"spec.duration/renewBefore: {e}")
    elif kind in ("Issuer", "ClusterIssuer"):
        types = [k for k in spec if k in CM_ISSUER_TYPES]
        out += [f"unknown field spec.{k}" for k in spec if k not in CM_ISSUER_TYPES]
        if len(types) != 1:
            out.append(f"spec has exactly one issuer type of {sorted(CM_ISSUER_TYPES)} (got {types})")
        for t in types:
            body = spec[t] if spec[t] is not None else {}
            if not isinstance(body, dict):
                out.append(f"spec.{t} is an object")
                continue
            if CM_ISSUER_TYPES[t] is not None:
                out += [f"unknown field spec.{t}.{k}" for k in body if k not in CM_ISSUER_TYPES[t]]
            if t == "ca" and not body.get("secretName"):
                out.append("spec.ca.secretName (required) names the CA's Secret")
    else:
        out.append(f"kind {kind} is Certificate, Issuer or ClusterIssuer")
    return out


# --- docker compose: an override file merged over the base ---------------------

def _env_dict(e):
    if isinstance(e, list):
        e = dict(x.split("=", 1) if "=" in x else (x, "") for x in e)
    return dict(e or {})


def _deps_dict(d):
    if isinstance(d, list):
        return {x: {"condition": "service_started"} for x in d}
    return dict(d or {})


def _volume_target(v):
    if isinstance(v, dict):
        return v.get("target")
    parts = str(v).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def merge_compose(base, override):
    """`docker compose -f base -f override` merge rules for what these files use:
    maps merge (environment, depends_on, healthcheck...), volumes merge by
    container path, ports and other sets are unions, everything else is replaced."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if str(k).startswith("x-"):
            continue
        if k == "services":
            svcs = out.setdefault("services", {})
            for name, s in (v or {}).items():
                b, o = copy.deepcopy(svcs.get(name) or {}), s or {}
                for sk, sv in o.items():
                    if sk == "environment":
                        b[sk] = {**_env_dict(b.get(sk)), **_env_dict(sv)}
                    elif sk == "depends_on":
                        b[sk] = {**_deps_dict(b.get(sk)), **_deps_dict(sv)}
                    elif sk == "volumes":
                        merged = {_volume_target(x): x for x in b.get(sk) or []}
                        merged.update({_volume_target(x): x for x in sv or []})
                        b[sk] = list(merged.values())
                    elif sk in ("ports", "expose", "dns", "tmpfs", "cap_add", "cap_drop", "security_opt", "extra_hosts"):
                        b[sk] = list(b.get(sk) or []) + [x for x in sv or [] if x not in (b.get(sk) or [])]
                    elif isinstance(sv, dict) and isinstance(b.get(sk), dict):
                        b[sk] = {**b[sk], **copy.deepcopy(sv)}
                    else:
                        b[sk] = copy.deepcopy(sv)
                svcs[name] = b
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    return out


def gitignore_ignores(patterns, path):
    """Whether .gitignore-style patterns (last match wins, "!" negates, a
    leading "/" anchors, a trailing "/" means a directory) ignore path."""
    parts = path.strip("/").split("/")
    ignored = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        anchored = p.startswith("/") or "/" in p.rstrip("/")
        p = p.strip("/")
        for i in range(len(parts)):
            # the pattern names this prefix (a directory, or the file itself)
            cands = ["/".join(parts[: i + 1])] if anchored else [parts[i]]
            if any(fnmatch.fnmatchcase(c, p) for c in cands) and (i < len(parts) - 1 or not pat.endswith("/")):
                ignored = not neg
                break
    return ignored


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
        rc, _, err = run_help([self.facts["turnstiled"], *args, "--help"], {k: str(v) for k, v in env.items()})
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
        # A folder is copied with itself or with any folder above it.
        def is_copied(d):
            parts = d.split("/")
            return "." in copied or any("/".join(parts[:i]) in copied for i in range(1, len(parts) + 1))
        missing = [d for d in needed_dirs if not is_copied(d)]
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
                      "uid": uid, "exposed": exposed, "installed_bins": installed_bins}

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
        rc, _, err = run_help([self.facts["turnstile"], *argv[1:i], "health", "--help"], {})
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
    def check_compose(self, merged=None, S="compose", generated=()):
        """The compose rules, on docker-compose.yml or (merged) on it merged with
        an override file; `generated` are repo directories that a script makes
        (bind mounts of them need not exist in a checkout)."""
        if merged is None:
            path = self.path(COMPOSE_FILE)
            if not self.expect(os.path.isfile(path), S, f"{COMPOSE_FILE} exists"):
                return None
            try:
                docs = load_yaml_docs(path)
            except yaml.YAMLError as e:
                self.fail(S, f"{COMPOSE_FILE} parses: {e}")
                return None
            if not self.expect(len(docs) == 1 and isinstance(docs[0], dict), S,
                               f"{COMPOSE_FILE} parses (strict YAML, one mapping)"):
                return None
            c = docs[0]
        else:
            c = merged
        top_known = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
        unknown = [k for k in c if k not in top_known and not str(k).startswith("x-")]
        self.expect(not unknown, S, "only known top-level keys", f"unknown: {unknown}")
        services = c.get("services") or {}
        if not self.expect(isinstance(services, dict) and services, S, f"{len(services)} services"):
            return None
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
                    made = os.path.normpath(m["source"]) in generated
                    self.expect((os.path.exists(hp) or made) and self.inside_repo(hp), S,
                                f"{name}: mounted {m['source']} exists in the repository" +
                                (f" (made by {MAKE_DEV_CA})" if made else ""))
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
        facts = {"services": services, "zk": zk, "ts": ts, "published": published,
                 "ts_image": next(iter(ts_images)) if len(ts_images) == 1 else None,
                 "envmap": envmap, "mounts": mounts, "host_path": host_path, "ts_ports": ts_ports}
        if merged is not None:
            return facts  # an override's merge: the monitoring rules below are the base's
        self.compose = facts

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
        return facts

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
        # One validator run for the base and the mTLS overlay's own objects.
        self.check_k8s_schema(objs + self.k8s_mtls_schema_objs())
        img_map = {}
        for im in kust.get("images") or []:
            img_map[im.get("name")] = im
        self.k8s_rules([o["object"] for o in objs], ns, img_map, S)

    def k8s_rules(self, objects, ns, img_map, S, mtls=None):
        """The project rules over a set of objects (the base's manifests, or the
        mTLS overlay rendered). mtls: the overlay's TLS context (probes differ).
        Returns what the overlay's own checks need."""
        by_kind = {}
        for o in objects:
            by_kind.setdefault(o.get("kind"), []).append(o)
        self.expect([n["metadata"]["name"] for n in by_kind.get("Namespace", [])] == [ns], S,
                    f"a Namespace manifest creates {ns}")

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
            self.check_zk_statefulset(stss[0], services, by_kind, ns, containers, container_ports, pod_labels, selected, S)
        # --- turnstile Deployment ---
        cms = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
        deps = [d for d in by_kind.get("Deployment", [])
                if any(eff_image(c.get("image", "")).partition(":")[0] == "turnstile" or
                       eff_image(c.get("image", "")) == self.compose.get("ts_image") for c in containers(d))]
        ctx = {"by_kind": by_kind, "services": services, "cms": cms, "deployment": None,
               "containers": containers, "container_ports": container_ports, "pod_labels": pod_labels,
               "selected": selected, "eff_image": eff_image}
        if self.expect(len(deps) == 1, S, "one turnstile Deployment"):
            ctx["deployment"] = deps[0]
            ctx.update(self.check_turnstile_deployment(deps[0], cms, services, by_kind, ns, eff_image, containers,
                                                       container_ports, pod_labels, selected, S, mtls) or {})
        return ctx

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
                                   pod_labels, selected, S="k8s", mtls=None):
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
            if mtls is not None:
                mtls["probe"](c, probe, p, g, env)  # TLS: exec probes with a client certificate
                continue
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
        return {"container": c, "env": env, "set_vars": set_vars, "grpc_port": g, "args": args}

    _zk_client_port = None

    def check_zk_statefulset(self, st, services, by_kind, ns, containers, container_ports, pod_labels, selected, S="k8s"):
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
        """deploy/README.md (operating turnstile) names real services, ports
        and files; the top README's set-up names the package list."""
        S = "readme"
        top = self.path("README.md")
        if self.expect(os.path.isfile(top), S, "README.md exists"):
            self.expect(BUILD_LIST in open(top, encoding="utf-8").read(), S,
                        f"README set-up names {BUILD_LIST}")
        for f in ("tests/run.sh", "deploy/local/quickstart.sh"):
            t = open(self.path(f)).read() if os.path.isfile(self.path(f)) else ""
            self.expect("install-deps.sh" in t, S, f"{f} (README set-up) installs through install-deps.sh")
        p = self.path("deploy/README.md")
        if not self.expect(os.path.isfile(p), S, "deploy/README.md exists"):
            return
        text = open(p, encoding="utf-8").read()
        heads = re.findall(r"^## (.+)$", text, re.M)
        for h in ("docker-compose", "Kubernetes"):
            self.expect(h in heads, S, f"deploy/README.md has section \"{h}\"")
        self.expect("docker compose up -d --build" in text and "kubectl apply -k deploy/k8s" in text, S,
                    "deploy/README.md gives the compose and kubectl commands")
        self.expect("tests/check_deploy.sh" in text, S,
                    "deploy/README.md says the deployment files are checked by tests/check_deploy.sh")
        services = self.compose.get("services") or {}
        for svc in sorted(set(re.findall(r"docker compose exec (?:-\S+ )*([a-z0-9-]+)", text))):
            self.expect(svc in services, S, f"deploy/README.md's `docker compose exec {svc}` names a compose service")
        published = {int(h) for (_, h, _) in self.compose.get("published", {})}
        for port in sorted({int(x) for x in re.findall(r"http://127\.0\.0\.1:(\d+)", text)}):
            self.expect(port in published, S, f"deploy/README.md's http://127.0.0.1:{port} is a published compose port")
        folder = text.split("## What is in this folder", 1)[-1].split("\n## ", 1)[0]
        for item in ("`docker/`", "`k8s/`", "`k8s-mtls/`", "`compose/`"):
            self.expect(item in folder, S, f"deploy/README.md's folder table names {item}")

    # =========================================================================
    # Issue 13: mutual TLS + authorization. make-dev-ca.sh (run in a temp dir),
    # the compose override (merged with docker-compose.yml, then the compose
    # rules plus the TLS cross-references) and the Kubernetes overlay
    # (rendered, then the k8s rules with exec probes, cert-manager objects and
    # the TLS cross-references).

    _pki_cache = {}      # make-dev-ca.sh text -> (outcomes, facts)
    _kubectl_cache = {}  # overlay + base files -> `kubectl kustomize` result

    def check_pki(self):
        S = "pki"
        script = self.path(MAKE_DEV_CA)
        gi = read_list(self.path(".gitignore")) if os.path.isfile(self.path(".gitignore")) else []
        self.expect(gitignore_ignores(gi, DEV_PKI_DIR + "/ca.key"), S,
                    f"{DEV_PKI_DIR}/ (make-dev-ca.sh's keys) is ignored by .gitignore")
        di = read_list(self.path(DOCKERIGNORE)) if os.path.isfile(self.path(DOCKERIGNORE)) else []
        self.expect(dockerignore_excludes(di, DEV_PKI_DIR + "/ca.key"), S,
                    f"build context excludes {DEV_PKI_DIR} ({DOCKERIGNORE}): no key is sent to a Docker build")
        if not self.expect(os.path.isfile(script), S, f"{MAKE_DEV_CA} exists"):
            return
        text = open(script, encoding="utf-8").read()
        cached = Checker._pki_cache.get(text)
        if cached is None:
            outcomes, facts = [], {}
            try:
                self._run_make_dev_ca(script, outcomes, facts)
            except Exception as e:  # noqa: BLE001 -- reported as a failure
                outcomes.append((False, f"{MAKE_DEV_CA} could be checked", f"{type(e).__name__}: {e}"))
            cached = (outcomes, facts)
            Checker._pki_cache[text] = cached
        for cond, msg, why in cached[0]:
            self.expect(cond, S, msg, why)
        self.pki = cached[1]

    def _run_make_dev_ca(self, script, outcomes, facts):
        def expect(cond, msg, why=""):
            outcomes.append((bool(cond), msg, why))
            return bool(cond)

        m = re.search(r'^DEFAULT_IDENTITY="([^"]+)"', open(script).read(), re.M)
        default_id = m.group(1) if m else None
        facts["default_identity"] = default_id
        with tempfile.TemporaryDirectory(prefix="turnstile-pki-") as tmp:
            out = os.path.join(tmp, "pki")
            rc, so, se = run(["bash", script, out], env=dict(os.environ))
            if not expect(rc == 0, f"make-dev-ca.sh OUT_DIR runs (exit {rc})", se.strip()[-500:]):
                return
            files = sorted(os.listdir(out))
            facts["files"] = set(files)
            for f in ("ca.crt", "ca.key", "server.crt", "server.key"):
                expect(f in files, f"make-dev-ca.sh makes {f}", f"made {files}")
            crts = [f for f in files if f.endswith(".crt") and f != "ca.crt"]
            rc, so, se = run(["openssl", "verify", "-CAfile", os.path.join(out, "ca.crt")] +
                             [os.path.join(out, f) for f in crts])
            expect(rc == 0 and so.count(": OK") == len(crts), f"openssl verify -CAfile ca.crt: {crts} chain to the CA",
                   (so + se).strip()[-400:])

            def cert_info(f):
                _, txt, _ = run(["openssl", "x509", "-in", os.path.join(out, f), "-noout", "-text"])
                san = re.search(r"X509v3 Subject Alternative Name:.*?\n\s*(.*)\n", txt)
                eku = re.search(r"X509v3 Extended Key Usage:.*?\n\s*(.*)\n", txt)
                cn = re.search(r"Subject:.*?CN\s*=\s*([^,\n]+)", txt)
                return {"san": [s.strip().replace("IP Address:", "IP:") for s in san.group(1).split(",")] if san else [],
                        "eku": eku.group(1) if eku else "", "cn": cn.group(1).strip() if cn else None,
                        "ca": bool(re.search(r"CA:TRUE", txt)), "p256": "prime256v1" in txt}
            ca = cert_info("ca.crt")
            expect(ca["ca"] and ca["p256"], "ca.crt is a CA certificate (basicConstraints CA:TRUE) with an EC P-256 key")
            srv = cert_info("server.crt")
            facts["server_sans"] = set(srv["san"])
            expect("TLS Web Server Authentication" in srv["eku"] and srv["p256"] and not srv["ca"], "server.crt: "
                   "extendedKeyUsage serverAuth, EC P-256, not a CA", f"EKU {srv['eku']!r}")
            expect({"DNS:localhost", "IP:127.0.0.1"} <= set(srv["san"]), f"server.crt names localhost and 127.0.0.1 "
                   f"(health checks dial 127.0.0.1)", f"SANs {srv['san']}")
            clients = {}
            for f in crts:
                if f == "server.crt":
                    continue
                info = cert_info(f)
                uris = [s[4:] for s in info["san"] if s.startswith("URI:")]
                ident = uris[0] if uris else None
                clients[f] = {"identity": ident, "key": f[:-4] + ".key"}
                slug = re.sub(r"[^A-Za-z0-9._-]+", "-", ident.split("://", 1)[-1]).strip("-") if ident else "?"
                expect(ident and f == f"client-{slug}.crt", f"{f}: carries a URI SAN (the identity {ident}) and is "
                       f"named client-SLUG.crt after it", f"SANs {info['san']}")
                expect("TLS Web Client Authentication" in info["eku"] and info["p256"], f"{f}: extendedKeyUsage "
                       f"clientAuth, EC P-256", f"EKU {info['eku']!r}")
                expect(ident and info["cn"] == ident.rstrip("/").rsplit("/", 1)[-1], f"{f}: CN is the identity's "
                       f"last path segment", f"CN {info['cn']}")
                expect(f[:-4] + ".key" in files, f"{f}: its key {f[:-4]}.key is made")
            facts["clients"] = clients
            ids = {c["identity"] for c in clients.values()}
            expect(default_id in ids, f"without identities, a client certificate for the default {default_id}",
                   f"identities {sorted(i for i in ids if i)}")
            for f in files:
                if f.endswith(".key"):
                    mode = os.stat(os.path.join(out, f)).st_mode & 0o777
                    expect(mode == 0o600, f"{f} has mode 600 (got {mode:o})")
                    _, txt, _ = run(["openssl", "pkey", "-in", os.path.join(out, f), "-noout", "-text"])
                    expect("prime256v1" in txt, f"{f} is an EC P-256 key")
            # Idempotent: a second run keeps everything; a new identity is issued by the same CA.
            before = {f: open(os.path.join(out, f), "rb").read() for f in files}
            extra = "spiffe://check.example/ns/x/sa/extra-id"
            rc, so, se = run(["bash", script, out, extra], env=dict(os.environ))
            after = {f: open(os.path.join(out, f), "rb").read() for f in files if os.path.exists(os.path.join(out, f))}
            expect(rc == 0 and before == after, "a second run keeps the existing CA and certificates (idempotent)",
                   f"exit {rc}; changed: {sorted(f for f in files if before.get(f) != after.get(f))} {se.strip()[-300:]}")
            xf = "client-check.example-ns-x-sa-extra-id.crt"
            rc2, so2, _ = run(["openssl", "verify", "-CAfile", os.path.join(out, "ca.crt"), os.path.join(out, xf)])
            expect(rc == 0 and rc2 == 0, f"a later run with a new identity issues {xf} from the same CA", so2.strip())
            rc, so, se = run(["bash", script, out, "not-a-uri"], env=dict(os.environ))
            expect(rc != 0 and sorted(os.listdir(out)) == sorted(set(files) | {xf, xf[:-4] + ".key"}),
                   "an identity that is no URI is refused before anything is written", f"exit {rc}")
            rc, so, se = run(["bash", script, "--force", out], env=dict(os.environ))
            new_ca = open(os.path.join(out, "ca.crt"), "rb").read() if os.path.exists(os.path.join(out, "ca.crt")) else b""
            rc2, so2, _ = run(["openssl", "verify", "-CAfile", os.path.join(out, "ca.crt"),
                               os.path.join(out, "server.crt")])
            expect(rc == 0 and new_ca != before["ca.crt"] and rc2 == 0, "--force replaces the CA and re-issues the "
                   "certificates from the new one", f"exit {rc} {se.strip()[-300:]}")

    def pod_file_source(self, pod_spec, container, path):
        """Where a file of a container comes from: {"kind": "secret"|"configMap", "name",
        "key", "mount", "volume"} or None (no volume mounted there)."""
        best = None
        for vm in container.get("volumeMounts") or []:
            mp = str(vm.get("mountPath", "")).rstrip("/")
            if str(path).startswith(mp + "/") and (best is None or len(mp) > len(best[0])):
                best = (mp, vm)
        if not best or best[1].get("subPath"):
            return None
        rel = str(path)[len(best[0]) + 1:]
        vol = next((v for v in pod_spec.get("volumes") or [] if v.get("name") == best[1].get("name")), None)
        if vol is None:
            return None
        for kind, field in (("secret", "secretName"), ("configMap", "name")):
            if kind in vol:
                src = vol[kind] or {}
                items = src.get("items")
                key = next((i.get("key") for i in items if i.get("path") == rel), None) if items else \
                    (rel if "/" not in rel else None)
                return {"kind": kind, "name": src.get(field), "key": key, "mount": best[1], "volume": vol}
        return {"kind": "other", "name": None, "key": None, "mount": best[1], "volume": vol}

    def k8s_mtls_render(self):
        if getattr(self, "_mtls_render", None) is None:
            try:
                self._mtls_render = render_kustomization(self.root, K8S_MTLS_DIR)
            except Exception as e:  # noqa: BLE001
                self._mtls_render = ([], None, [f"{type(e).__name__}: {e}"])
        return self._mtls_render

    def k8s_mtls_schema_objs(self):
        """The overlay's built-in objects that the base does not have as they are
        (the patched Deployment, the policy ConfigMap): validated with the base's."""
        if not os.path.isdir(self.path(K8S_MTLS_DIR)):
            return []
        objs, kust, _ = self.k8s_mtls_render()
        base = {canonical(o["object"]) for o in render_kustomization(self.root, K8S_DIR)[0]}
        out = []
        for o in objs:
            if str(o["object"].get("apiVersion", "")).startswith("cert-manager.io/"):
                continue
            if canonical(o["object"]) not in base:
                out.append({"file": f"{K8S_MTLS_DIR} (rendered) {o['file']}", "index": o["index"], "object": o["object"]})
        self._mtls_schema_sent = True
        return out

    def check_kubectl_render(self, rel_dir, objs, S):
        """The renderer above against the real kustomize (kubectl's), when installed."""
        kubectl = shutil.which("kubectl")
        if self.quiet:
            return  # mutations: the renderer was cross-checked on the real files
        if not kubectl:
            print(f"  note [{S}] kubectl not installed: the rendering is not compared with `kubectl kustomize`")
            return
        key = []
        for d in (K8S_DIR, rel_dir):
            for f in sorted(os.listdir(self.path(d))):
                if os.path.isfile(self.path(f"{d}/{f}")):
                    key.append(f + open(self.path(f"{d}/{f}"), "rb").read().decode("utf-8", "replace"))
        key = hashlib.sha256("\0".join(key).encode()).hexdigest()
        if key not in Checker._kubectl_cache:
            Checker._kubectl_cache[key] = run([kubectl, "kustomize", self.path(rel_dir)], env=dict(os.environ))
        rc, out, err = Checker._kubectl_cache[key]
        if not self.expect(rc == 0, S, f"`kubectl kustomize {rel_dir}` renders it", err.strip()[-400:]):
            return
        theirs = {(o.get("kind"), (o.get("metadata") or {}).get("name")): canonical(o)
                  for o in yaml.safe_load_all(out) if o}
        mine = {(o["object"].get("kind"), (o["object"].get("metadata") or {}).get("name")): canonical(o["object"])
                for o in objs}
        diff = sorted(f"{k}/{n}" for k, n in set(theirs) | set(mine) if theirs.get((k, n)) != mine.get((k, n)))
        self.expect(not diff, S, f"this check renders {rel_dir} exactly as `kubectl kustomize` does "
                    f"({len(mine)} objects)", f"differ: {diff}")

    def check_k8s_mtls(self):
        S = "k8s-mtls"
        if not self.expect(os.path.isfile(self.path(K8S_MTLS_DIR + "/kustomization.yaml")), S,
                           f"{K8S_MTLS_DIR}/kustomization.yaml exists"):
            return
        objs, kust, problems = self.k8s_mtls_render()
        self.expect(not problems, S, f"{K8S_MTLS_DIR} renders (resources, generator, patches)", "; ".join(problems))
        if kust is None:
            return
        self.expect(kust.get("apiVersion") == "kustomize.config.k8s.io/v1beta1" and kust.get("kind") == "Kustomization",
                    S, "the overlay is a kustomize.config.k8s.io/v1beta1 Kustomization")
        res = [str(r) for r in kust.get("resources") or []]
        self.expect(sum(os.path.normpath(os.path.join(K8S_MTLS_DIR, r)) == K8S_DIR for r in res) == 1, S,
                    f"the overlay builds on the base {K8S_DIR} (resources: {res})")
        try:
            base_kust = load_yaml_docs(self.path(KUSTOMIZATION))[0]
        except (OSError, yaml.YAMLError, IndexError):
            base_kust = {}
        ns = base_kust.get("namespace")
        self.expect(ns and kust.get("namespace") == ns, S, f"the overlay sets the namespace {ns} of the base "
                    f"(its Certificates and ConfigMap land beside the Deployment)", f"got {kust.get('namespace')!r}")
        base_refs = [str(r) for k in ("resources", "components") for r in base_kust.get(k) or []]
        inc = [r for r in base_refs if os.path.normpath(os.path.join(K8S_DIR, r)).startswith(K8S_MTLS_DIR)]
        self.expect(not inc, S, f"the base kustomization does not include the overlay {K8S_MTLS_DIR} (mTLS is optional)",
                    f"base lists {inc}")
        used = {os.path.normpath(r) for r in res}
        used |= {os.path.normpath(str(p.get("path"))) for p in kust.get("patches") or [] if isinstance(p, dict) and p.get("path")}
        for g in kust.get("configMapGenerator") or []:
            used |= {os.path.normpath(str(f).split("=", 1)[-1]) for f in g.get("files") or []}
        files = {f for f in os.listdir(self.path(K8S_MTLS_DIR)) if f != "kustomization.yaml"}
        self.expect(files <= used, S, f"every file in {K8S_MTLS_DIR} is used by its kustomization",
                    f"unused: {sorted(files - used)}")
        self.check_kubectl_render(K8S_MTLS_DIR, objs, S)
        if not getattr(self, "_mtls_schema_sent", False):  # the base check stopped early
            self.check_k8s_schema(self.k8s_mtls_schema_objs())
        objects = [o["object"] for o in objs]
        for o in objects:
            md = o.get("metadata") or {}
            if o.get("kind") not in CLUSTER_SCOPED and o.get("kind") != "ClusterIssuer":
                self.expect(md.get("namespace") == ns, S, f"{o.get('kind')}/{md.get('name')} is in namespace {ns}")
        cm_objs = [o for o in objects if str(o.get("apiVersion", "")).startswith("cert-manager.io/")
                   or o.get("kind") in ("Certificate", "Issuer", "ClusterIssuer")]
        for o in cm_objs:
            pr = cert_manager_problems(o)
            self.expect(not pr, S, f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}: valid cert-manager.io/v1 "
                        f"{o.get('kind')}", "; ".join(pr))
        certs = [o for o in cm_objs if o.get("kind") == "Certificate" and isinstance(o.get("spec"), dict)]
        issuers = {(o.get("kind"), (o.get("metadata") or {}).get("name")): o for o in cm_objs
                   if o.get("kind") in ("Issuer", "ClusterIssuer")}
        by_secret = {c["spec"].get("secretName"): c for c in certs if c["spec"].get("secretName")}

        def cname(c):
            return f"Certificate/{(c.get('metadata') or {}).get('name')}"

        def issuer_of(c):
            ref = c["spec"].get("issuerRef") or {}
            return issuers.get((ref.get("kind", "Issuer"), ref.get("name")))

        def ca_secret_of(c):
            """The Secret of the CA that signs c (c's own for a self-signed certificate)."""
            iss = issuer_of(c)
            spec = (iss or {}).get("spec") or {}
            if "ca" in spec:
                return (spec.get("ca") or {}).get("secretName")
            if "selfSigned" in spec:
                return c["spec"].get("secretName")
            return None

        def usages(c):
            return set(c["spec"].get("usages") or [])

        for c in certs:
            ref = c["spec"].get("issuerRef") or {}
            self.expect(issuer_of(c) is not None, S, f"{cname(c)}: issuerRef {ref.get('kind', 'Issuer')}/{ref.get('name')} "
                        f"is an issuer of the overlay")
            if c["spec"].get("isCA") is not True:
                iss = issuer_of(c) or {}
                self.expect("ca" in (iss.get("spec") or {}), S, f"{cname(c)}: issued by a CA Issuer (one CA signs the "
                            f"server and the clients; a self-signed leaf would not verify)")
        cas = [c for c in certs if c["spec"].get("isCA") is True]
        self.expect(cas, S, "a CA Certificate (isCA: true) bootstraps the namespace's CA")
        for (kind, name), iss in issuers.items():
            sec = ((iss.get("spec") or {}).get("ca") or {}).get("secretName")
            if "ca" in (iss.get("spec") or {}):
                self.expect(sec in by_secret and by_secret[sec]["spec"].get("isCA") is True, S,
                            f"CA {kind} {name}: secretName {sec} is an isCA Certificate's secret")

        # The project's rules over the rendered objects, probes recorded for below.
        probes = []
        tls_ctx = {"probe": lambda c, probe, p, g, env: probes.append((c, probe, p, g))}
        ctx = self.k8s_rules(objects, ns, {}, S, mtls=tls_ctx)
        d, c = ctx.get("deployment"), ctx.get("container")
        if d is None or c is None:
            return
        dn, cn = f"Deployment/{d['metadata']['name']}", f"Deployment/{d['metadata']['name']}/{c.get('name')}"
        pod = d["spec"]["template"]["spec"]
        env = ctx.get("env") or {}
        for v in TLS_FILE_ENVS:
            self.expect(env.get(v), S, f"{cn}: sets {v} (mutual TLS with a policy)")
        dep = tls_dependency_problems(env)
        self.expect(not dep, S, f"{cn}: the TLS/authz settings are complete (turnstiled's start-up rules)", "; ".join(dep))

        def src(path):
            return self.pod_file_source(pod, c, path) if path else None

        def secret_file(what, path, key):
            """path is file `key` of a mounted Certificate's Secret: that Certificate, or None."""
            s = src(path)
            cert = by_secret.get(s["name"]) if s and s["kind"] == "secret" else None
            self.expect(cert is not None and s["key"] == key, S, f"{cn}: {what}={path} is {key} of a mounted "
                        f"Certificate's Secret", f"resolves to {s and {k: s[k] for k in ('kind', 'name', 'key')}}")
            return cert if cert is not None and s["key"] == key else None

        def ca_file(what, path):
            """path is a CA certificate (ca.crt of a leaf, or tls.crt of the CA): the CA's Secret, or None."""
            s = src(path)
            cert = by_secret.get(s["name"]) if s and s["kind"] == "secret" else None
            ca = None
            if cert is not None and s["key"] == "ca.crt":
                ca = ca_secret_of(cert)
            elif cert is not None and s["key"] == "tls.crt" and cert["spec"].get("isCA") is True:
                ca = cert["spec"].get("secretName")
            self.expect(ca is not None, S, f"{cn}: {what}={path} is the CA certificate (ca.crt) of a mounted "
                        f"Certificate's Secret", f"resolves to {s and {k: s[k] for k in ('kind', 'name', 'key')}}")
            return ca

        server = secret_file("TURNSTILE_TLS_CERT_FILE", env.get("TURNSTILE_TLS_CERT_FILE"), "tls.crt")
        skey = secret_file("TURNSTILE_TLS_KEY_FILE", env.get("TURNSTILE_TLS_KEY_FILE"), "tls.key")
        self.expect(server is not None and server is skey, S, f"{cn}: the TLS certificate and key are the same "
                    f"Certificate's tls.crt and tls.key")
        client_ca = ca_file("TURNSTILE_TLS_CLIENT_CA_FILE", env.get("TURNSTILE_TLS_CLIENT_CA_FILE"))
        services = [s for s in ctx["services"] if service_selector_matches(s["spec"].get("selector") or {},
                                                                           ctx["pod_labels"](d))]
        if server is not None:
            self.expect("server auth" in usages(server), S, f"{cname(server)}: usages include server auth",
                        f"usages {sorted(usages(server))}")
            names = set(server["spec"].get("dnsNames") or [])
            want = {f"{s['metadata']['name']}{suf}" for s in services
                    for suf in ("", f".{ns}", f".{ns}.svc", f".{ns}.svc.cluster.local")}
            self.expect(want and want <= names, S, f"{cname(server)}: dnsNames cover every Service of the replicas "
                        f"({sorted(s['metadata']['name'] for s in services)}) in every short form",
                        f"missing {sorted(want - names)}")
        clients = [x for x in certs if "client auth" in usages(x)]
        for x in clients:
            self.expect(client_ca is not None and ca_secret_of(x) == client_ca, S,
                        f"{cname(x)}: a client certificate of the CA the replicas trust ({client_ca})",
                        f"signed by {ca_secret_of(x)}")
        # Mounted Secrets: made by Certificates, read-only, readable by turnstiled only.
        psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
        group = csc.get("runAsGroup", psc.get("runAsGroup"))
        mounted = {vm.get("name"): vm for vm in c.get("volumeMounts") or []}
        secret_vols = [v for v in pod.get("volumes") or [] if "secret" in v]
        for v in secret_vols:
            sn = (v.get("secret") or {}).get("secretName")
            self.expect(sn in by_secret, S, f"{dn}: mounted Secret {sn} is the secret of a Certificate of the overlay",
                        f"Certificate secrets {sorted(by_secret)}")
            mode = (v.get("secret") or {}).get("defaultMode")
            self.expect(isinstance(mode, int) and mode & 0o007 == 0, S, f"{dn}: Secret volume {v.get('name')}: key "
                        f"files not world-readable (defaultMode {oct(mode) if isinstance(mode, int) else 'unset = 0644'})")
            self.expect(isinstance(mode, int) and mode & 0o040 and psc.get("fsGroup") is not None and
                        psc.get("fsGroup") == group, S, f"{dn}: pod fsGroup {psc.get('fsGroup')} is turnstiled's group "
                        f"{group}, so it reads the group-readable Secret files of {v.get('name')}")
        for v in secret_vols + [v for v in pod.get("volumes") or [] if "configMap" in v]:
            vm = mounted.get(v.get("name"))
            if vm is not None:
                self.expect(vm.get("readOnly") is True, S, f"{cn}: {vm.get('mountPath')} ({v.get('name')}) is mounted read-only")
        # The policy: a ConfigMap key, valid, kept under its name, granting the example client.
        ap = env.get("TURNSTILE_AUTHZ_FILE")
        s = src(ap)
        cms = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ConfigMap"}
        cm = cms.get(s["name"]) if s and s["kind"] == "configMap" else None
        text = ((cm or {}).get("data") or {}).get(s["key"]) if cm and s["key"] else None
        rules = None
        if self.expect(text is not None, S, f"{cn}: TURNSTILE_AUTHZ_FILE={ap} is a key of a mounted ConfigMap of the overlay",
                       f"resolves to {s and {k: s[k] for k in ('kind', 'name', 'key')}}"):
            rules, pr = parse_policy(text)
            self.expect(not pr, S, f"ConfigMap/{s['name']} {s['key']}: a valid authorization policy "
                        f"({len(rules or [])} rules; fields and actions of protos/turnstile/v1/authz.proto)", "; ".join(pr))
        for g in kust.get("configMapGenerator") or []:
            opts = dict(kust.get("generatorOptions") or {})
            opts.update(g.get("options") or {})
            self.expect(opts.get("disableNameSuffixHash") is True, S, f"generated ConfigMap {g.get('name')} keeps its name "
                        f"(disableNameSuffixHash): a policy edit is reloaded in place instead of rolling the pods")
        mounted_secrets = {(v.get("secret") or {}).get("secretName") for v in secret_vols}
        examples = [x for x in clients if x["spec"].get("uris") and x["spec"].get("secretName") not in mounted_secrets]
        self.expect(examples, S, "an example client Certificate with a URI SAN (SPIFFE ID) that the replicas do not use "
                    "themselves")
        for x in examples:
            ident = x["spec"]["uris"][0]
            granted = bool(rules) and any(policy_allows(rules, ident, a, p + "x") for r in rules
                                          for a in r["actions"] for p in r["locks"])
            self.expect(granted, S, f"the policy grants the example client {ident} something ({cname(x)})")
        # Probes: exec `turnstile ... health` with the health-check client certificate.
        live = self.liveness_service()
        for (pc, probe, p, g) in probes:
            handlers = [h for h in ("exec", "grpc", "httpGet", "tcpSocket") if h in p]
            if not self.expect(handlers == ["exec"], S, f"{cn}: {probe} is an exec probe running turnstile (the "
                               f"kubelet's gRPC probe has no client certificate)", f"handlers {handlers}"):
                continue
            argv = [str(x) for x in (p.get("exec") or {}).get("command") or []]
            self.check_health_cmd(S, f"{cn}: {probe}", argv, g, self.image.get("installed_bins"))
            flags, rest = cli_global_flags(argv)
            have = all(flags.get(f) for f in TLS_CLI_FLAGS)
            self.expect(have, S, f"{cn}: {probe} presents the health-check client certificate (--tls-ca-file, "
                        f"--tls-cert-file, --tls-key-file; else the CLI takes the server's TURNSTILE_TLS_* files)",
                        f"flags {sorted(flags)}")
            if have:
                ca = ca_file(f"{probe} --tls-ca-file", flags["tls-ca-file"])
                self.expect(server is not None and ca == ca_secret_of(server), S,
                            f"{cn}: {probe} --tls-ca-file is the CA of the server certificate")
                pcert = secret_file(f"{probe} --tls-cert-file", flags["tls-cert-file"], "tls.crt")
                pkey = secret_file(f"{probe} --tls-key-file", flags["tls-key-file"], "tls.key")
                self.expect(pcert is not None and pcert is pkey and "client auth" in usages(pcert) and
                            ca_secret_of(pcert) == client_ca, S, f"{cn}: {probe} presents a client-auth Certificate of "
                            f"the CA the replicas trust, with its own key")
            host = (split_hostport(flags.get("server") or "") or ("", 0))[0]
            if server is not None:
                self.expect(host in (server["spec"].get("ipAddresses") or []) + (server["spec"].get("dnsNames") or []),
                            S, f"{cn}: {probe} --server {host} is a name of the server certificate")
            rt = parse_duration_ms(flags.get("rpc-timeout", self.facts["cli_flags"].get("rpc-timeout", {}).get("default", "")))
            to = p.get("timeoutSeconds", 1)
            self.expect(rt is not None and rt < to * 1000, S, f"{cn}: {probe} --rpc-timeout {flags.get('rpc-timeout')} "
                        f"is below its timeoutSeconds {to}")
            svc = rest[1:]
            if probe == "readinessProbe":
                self.expect(svc in ([], [""]), S, f"{cn}: readinessProbe asks for the overall health (service \"\")",
                            f"got {svc}")
            else:
                self.expect(live is not None and svc == [live], S, f"{cn}: livenessProbe asks the service turnstiled "
                            f"keeps SERVING while it runs (kLivenessService {live!r})", f"got {svc}")

    def check_compose_mtls(self):
        S = "compose-mtls"
        p = self.path(COMPOSE_MTLS)
        if not self.expect(os.path.isfile(p), S, f"{COMPOSE_MTLS} exists"):
            return
        text = open(p, encoding="utf-8").read()
        try:
            docs = load_yaml_docs(p)
            base = load_yaml_docs(self.path(COMPOSE_FILE))[0]
        except (yaml.YAMLError, OSError, IndexError) as e:
            self.fail(S, f"{COMPOSE_MTLS} and {COMPOSE_FILE} parse: {e}")
            return
        if not self.expect(len(docs) == 1 and isinstance(docs[0], dict), S, f"{COMPOSE_MTLS} parses (strict YAML, one mapping)"):
            return
        ov = docs[0]
        bad = [k for k in ov if k not in ("services", "volumes") and not str(k).startswith("x-")]
        self.expect(not bad, S, f"{COMPOSE_MTLS}: only services, volumes and x- keys", f"unknown: {bad}")
        self.expect(f"make-dev-ca.sh {DEV_PKI_DIR}" in text and f"-f {COMPOSE_FILE} -f {COMPOSE_MTLS}" in text, S,
                    f"{COMPOSE_MTLS} says how to use it (make-dev-ca.sh {DEV_PKI_DIR}, docker compose -f ... -f ...)")
        merged = merge_compose(base, ov)
        facts = self.check_compose(merged, S, generated={DEV_PKI_DIR})
        if not facts:
            return
        services, ts, envmap, mounts = facts["services"], facts["ts"], facts["envmap"], facts["mounts"]
        self.expect(set(ts) <= set((ov.get("services") or {})), S, f"the override configures every replica {sorted(ts)}")
        pki = getattr(self, "pki", {}) or {}
        made = pki.get("files") or set()
        sans = pki.get("server_sans") or set()
        self.expect(sans and {f"DNS:{n}" for n in ts} <= sans, S, f"make-dev-ca.sh's server.crt names every replica "
                    f"service {sorted(ts)} (clients on the compose network dial them)", f"SANs {sorted(sans)}")

        def source(s, path):
            """("repo", relpath) for a bind mount; ("pki", name, filler) for a file that a
            one-shot service copies from make-dev-ca.sh's output into a volume; else None."""
            best = None
            for m in mounts(s):
                t = str(m["target"]).rstrip("/")
                if str(path).startswith(t + "/") and (best is None or len(t) > len(best[0])):
                    best = (t, m)
            if not best:
                return None
            rel = str(path)[len(best[0]) + 1:]
            m = best[1]
            if m["type"] == "bind":
                return ("repo", os.path.normpath(os.path.join(m["source"], rel)))
            for fn, fs in services.items():
                if any(x["type"] == "volume" and x["source"] == m["source"] and not x.get("read_only") for x in mounts(fs)):
                    cmd = fs.get("command")
                    cmd = "\n".join(cmd) if isinstance(cmd, list) else str(cmd or "")
                    binds = [x for x in mounts(fs) if x["type"] == "bind"]
                    copied = set(re.findall(r"(?<![\w./-])([\w.-]+\.(?:crt|key|pem))\b", cmd))
                    from_pki = len(binds) == 1 and os.path.normpath(binds[0]["source"]) == DEV_PKI_DIR
                    if rel in copied and from_pki:
                        return ("pki", rel, fn)
                    return ("volume-other", rel, fn)
            return None

        fillers = set()
        for n, s in ts.items():
            env = envmap(s)
            for v in TLS_FILE_ENVS:
                self.expect(env.get(v), S, f"{n}: sets {v} (mutual TLS with a policy)")
            dep = tls_dependency_problems(env)
            self.expect(not dep, S, f"{n}: the TLS/authz settings are complete (turnstiled's start-up rules)", "; ".join(dep))
            for v, want in (("TURNSTILE_TLS_CERT_FILE", "server.crt"), ("TURNSTILE_TLS_KEY_FILE", "server.key"),
                            ("TURNSTILE_TLS_CLIENT_CA_FILE", "ca.crt")):
                got = source(s, env.get(v, ""))
                self.expect(got and got[0] == "pki" and got[1] == want and want in made, S,
                            f"{n}: {v}={env.get(v)} is make-dev-ca.sh's {want}, copied into a volume mounted there",
                            f"resolves to {got}")
                if got and got[0] in ("pki", "volume-other"):
                    fillers.add(got[2])
            got = source(s, env.get("TURNSTILE_AUTHZ_FILE", ""))
            ok = got and got[0] == "repo" and os.path.isfile(self.path(got[1]))
            if self.expect(ok, S, f"{n}: TURNSTILE_AUTHZ_FILE={env.get('TURNSTILE_AUTHZ_FILE')} is a policy file of the "
                           f"repository mounted there", f"resolves to {got}"):
                rules, pr = parse_policy(open(self.path(got[1]), encoding="utf-8").read())
                self.expect(not pr, S, f"{got[1]}: a valid authorization policy ({len(rules or [])} rules; fields and "
                            f"actions of protos/turnstile/v1/authz.proto)", "; ".join(pr))
                did = pki.get("default_identity")
                self.expect(rules and did and policy_allows(rules, did, "acquire", "demo"), S,
                            f"{got[1]} lets make-dev-ca.sh's default client {did} acquire lock demo (the README's demo)")
                self.expect(any(m["type"] == "bind" and str(m["target"]).rstrip("/") ==
                                os.path.dirname(env["TURNSTILE_AUTHZ_FILE"]) for m in mounts(s)), S,
                            f"{n}: the policy's directory is mounted (a single-file mount would not see an edited file)")
            for m in mounts(s):
                if m["type"] == "volume":
                    self.expect(m.get("read_only"), S, f"{n}: volume {m['source']} is mounted read-only")
            deps = _deps_dict(s.get("depends_on"))
            for f in sorted(fillers):
                self.expect((deps.get(f) or {}).get("condition") == "service_completed_successfully", S,
                            f"{n}: starts after {f} has filled the certificate volume (service_completed_successfully)")
            hc = (s.get("healthcheck") or {}).get("test") or []
            flags, _ = cli_global_flags(list(hc[1:]) if hc and hc[0] == "CMD" else [])
            have = all(flags.get(f) for f in TLS_CLI_FLAGS)
            if self.expect(have, S, f"{n}: healthcheck presents a client certificate (--tls-ca-file, --tls-cert-file, "
                           f"--tls-key-file; else the CLI takes the server's TURNSTILE_TLS_* files)", f"flags {sorted(flags)}"):
                ca, crt, key = (source(s, flags[f]) for f in TLS_CLI_FLAGS)
                self.expect(ca and ca[0] == "pki" and ca[1] == "ca.crt", S, f"{n}: healthcheck --tls-ca-file is the CA",
                            f"resolves to {ca}")
                cl = (pki.get("clients") or {}).get(crt[1]) if crt and crt[0] == "pki" else None
                self.expect(cl is not None and key and key[0] == "pki" and key[1] == cl["key"], S,
                            f"{n}: healthcheck --tls-cert-file/--tls-key-file are a client certificate of make-dev-ca.sh "
                            f"and its key, copied into the volume", f"resolve to {crt}, {key}")
            host = (split_hostport(flags.get("server") or "") or ("", 0))[0]
            self.expect(f"IP:{host}" in sans or f"DNS:{host}" in sans, S,
                        f"{n}: healthcheck --server {host} is a name of server.crt")
        uid = self.image.get("uid")
        for f in sorted(fillers):
            fs = services[f]
            binds = [x for x in mounts(fs) if x["type"] == "bind"]
            self.expect(len(binds) == 1 and os.path.normpath(binds[0]["source"]) == DEV_PKI_DIR and binds[0].get("read_only"),
                        S, f"{f}: copies from {DEV_PKI_DIR} (make-dev-ca.sh's output) mounted read-only")
            cmd = fs.get("command")
            cmd = "\n".join(cmd) if isinstance(cmd, list) else str(cmd or "")
            self.expect(not re.search(r"(?<![\w.-])ca\.key\b|\*\.key|\bcp\s+-r", cmd), S,
                        f"{f}: never copies the CA key (ca.key) into a container volume")
            tag = str(fs.get("image", "")).rpartition(":")[2] if ":" in str(fs.get("image", "")) else ""
            self.expect(tag and tag != "latest", S, f"{f}: image pinned ({fs.get('image')})")
            self.expect(fs.get("network_mode") == "none", S, f"{f}: no network (it only copies files)")
            lines = [ln for ln in cmd.splitlines() if re.search(r"\binstall\b", ln)]
            ok = bool(lines)
            for ln in lines:
                o, m = re.search(r"-o\s+(\S+)", ln), re.search(r"-m\s+([0-7]+)", ln)
                ok = ok and o is not None and o.group(1) == str(uid) and m is not None
                if ".key" in ln:
                    ok = ok and m is not None and int(m.group(1), 8) & 0o077 == 0
            self.expect(ok, S, f"{f}: installs the files owned by uid {uid} (the image's USER), keys with no group or "
                        f"other access", f"install lines {lines}")

    def run_all(self):
        for title, section, fn in (("Dockerfile", "dockerfile", self.check_dockerfile),
                                   ("docker-compose.yml", "compose", self.check_compose),
                                   ("deploy/k8s", "k8s", self.check_k8s),
                                   (MAKE_DEV_CA, "pki", self.check_pki),
                                   (COMPOSE_MTLS + " (over docker-compose.yml)", "compose-mtls", self.check_compose_mtls),
                                   (K8S_MTLS_DIR, "k8s-mtls", self.check_k8s_mtls),
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
