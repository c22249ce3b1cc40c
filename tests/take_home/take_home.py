#!/usr/bin/python3
"""Take-home and documentation tests: turnstile as a user gets it.

Everything here runs against an INSTALLED turnstile (`cmake --install BUILD
--prefix PREFIX` into a temp dir), from directories outside the repository,
against a live stack this script starts on loopback: one ZooKeeper and one
turnstiled from PREFIX/bin, used once `turnstile health` says SERVING.

    take_home.py --build BUILD all        install, set up every language,
                                          run the consumers and the docs
    take_home.py --build BUILD setup      install + every LANG.sh setup into a
                                          temp dir; remembered in
                                          BUILD/take_home/state.json
    take_home.py --build BUILD consumers --use-setup
    take_home.py --build BUILD docs --use-setup [--readme FILE]... [--langs L,..]
    take_home.py --build BUILD cleanup    remove what `setup` made
    take_home.py lint [--root DIR]        README length, contents, no issue numbers,
                                          exit codes and installed files documented
    take_home.py --build BUILD selftest   the checks above fail when they must

(ctest: take_home_setup / take_home_test / docs_test / take_home_cleanup
share one setup as a fixture; docs_lint; take_home_harness_selftest.)
Without --use-setup, `consumers` and `docs` install and set up what they
need themselves, in a temp dir removed at the end.

Per language LANG (cpp, cpp-pkgconfig, python, node, java, go) the
language's owner provides tests/take_home/LANG.sh (`setup WORK`, `run WORK
SOURCE`) and a consumer program (tests/take_home/consumer.*): the contract
is in the file header of the scripts and in tests/README.md.

Consumers: each is copied with 127.0.0.1:7400 replaced by the live
replica's address, run through `LANG.sh run`, and must exit 0 printing
exactly one line `fencing_token=N`. A fencing token is the contender node's
czxid, a ZooKeeper transaction id: the consumers run one after another
against one ZooKeeper, so their tokens must strictly increase in run order
(and be > 0) even though each takes a lock of its own.

Docs: a block of a tracked *.md file is RUNNABLE when the line just before
its opening fence is exactly `<!-- runnable -->` or `<!-- runnable as
FILENAME -->`. It is written out verbatim except that every 127.0.0.1:7400
becomes the live address, as FILENAME or main.<ext> by its fence's info
string, in a fresh directory of its own, and run: sh/bash blocks with
`bash -e` in a fresh temp cwd with PREFIX/bin first on PATH, other
languages through `LANG.sh run` (C++ blocks through cpp.sh). Each must exit
0 within 60 s (plus, for a language that compiles, a build allowance). A
marker that is not followed by a fence fails too. README.md, client/README.md
and every library's README must have at least one runnable block, and in a
library's README an example in its language must exist; in each of these
documents the first example of each language (sh excepted) must be runnable.

Lint: README.md has at most 320 lines and a table of contents: a `## Contents`
(or `## Table of contents`) heading whose list links, with #anchors, to
every other `##` heading of the file. No tracked *.md file contains "issue"
followed by a number (grep -rniE, any case, "#" optional). Two facts the
documents repeat from the code: client/README.md's exit-code table has a
row for every exit code the CLI names (client/cli_common.h's kExit...
constants), and what `cmake --install` puts in the prefix (the CMake
files' install() rules) is in client/lib/README.md's install table, its
programs also in README.md.

Exit status: 0 when everything checked passed, 1 on a failure (each is
printed), 2 on usage errors.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "conformance"))
import harness as conformance  # noqa: E402  (ZooKeeper, Replica)

LANGS = ["cpp", "cpp-pkgconfig", "python", "node", "java", "go"]
CONSUMERS = {
    "cpp": ["consumer.cc"],
    "cpp-pkgconfig": ["consumer.cc"],
    "python": ["consumer.py"],
    "node": ["consumer.js", "consumer.mjs"],
    "java": ["Consumer.java"],
    "go": ["consumer.go"],
}
DEFAULT_ADDRESS = "127.0.0.1:7400"
# A fence's info string (its first word) -> the language that runs it.
FENCE_LANG = {
    "sh": "sh", "bash": "sh", "shell": "sh",
    "python": "python", "py": "python", "python3": "python",
    "js": "node", "javascript": "node", "mjs": "node", "cjs": "node",
    "java": "java", "go": "go", "cpp": "cpp", "c++": "cpp",
}
# ... and the file a block without a name is written to.
DEFAULT_NAME = {
    "sh": "main.sh", "bash": "main.sh", "shell": "main.sh",
    "python": "main.py", "py": "main.py", "python3": "main.py",
    "js": "main.js", "javascript": "main.js", "mjs": "main.mjs", "cjs": "main.cjs",
    "go": "main.go", "cpp": "main.cc", "c++": "main.cc",
}
# For a block without a usable info string, the file name's extension.
EXT_LANG = {".sh": "sh", ".py": "python", ".js": "node", ".mjs": "node", ".cjs": "node",
            ".java": "java", ".go": "go", ".cc": "cpp", ".cpp": "cpp"}
BLOCK_SECONDS = 60
# `LANG.sh run` builds before it runs: the build's allowance on top of the
# block's 60 s (a gRPC C++ program takes ~30 s to compile on a busy core).
BUILD_ALLOWANCE = {"sh": 0, "python": 30, "node": 30, "java": 90, "go": 180,
                   "cpp": 180, "cpp-pkgconfig": 180}
SETUP_SECONDS = 600
# The documents that must show runnable blocks, and the language whose first
# example (first block with that info string) must be one of them.
EXPECTED_DOCS = [
    ("README.md", None, "the CLI tour"),
    ("client/README.md", None, "the CLI"),
    ("client/lib/README.md", "cpp", "the C++ library"),
    ("client/python/README.md", "python", "the Python library"),
    ("client/node/README.md", "node", "the Node.js library"),
    ("client/java/README.md", "java", "the Java library"),
    ("client/go/README.md", "go", "the Go library"),
]
README_MAX_LINES = 320
MARKER = re.compile(r"^<!--\s*runnable(?:\s+as\s+(\S+))?\s*-->$")
FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
ISSUE_PATTERN = r"\bissue #?[0-9]"


class Failure(Exception):
    pass


def log(msg=""):
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# Runnable blocks

class Block:
    def __init__(self, doc, line, info, filename, text):
        self.doc = doc          # path relative to the root, for reports
        self.line = line        # 1-based line of the opening fence
        self.info = info
        self.filename = filename
        self.text = text
        self.lang = FENCE_LANG.get(info.lower())
        if self.lang is None and filename:
            self.lang = EXT_LANG.get(os.path.splitext(filename)[1])

    @property
    def where(self):
        return "%s:%d" % (self.doc, self.line)

    def file_name(self):
        if self.filename:
            return self.filename
        if self.lang == "java":
            m = re.search(r"^\s*public\s+(?:final\s+|abstract\s+)*class\s+(\w+)", self.text, re.M)
            if not m:
                raise Failure("a java block needs a public class (or `runnable as FILE`)")
            return m.group(1) + ".java"
        return DEFAULT_NAME[self.info.lower()] if self.info.lower() in DEFAULT_NAME else None


def code_blocks(text):
    """Every fenced block of a Markdown text, with the marker before it:
    yields (line, info, marker match or None, body or None when unterminated).
    Markers inside fences are text, not markers."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3)
        close = re.compile(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence))
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
        if j == len(lines):
            yield i + 1, info, marker, None
            return
        body = []
        for raw in lines[i + 1:j]:
            # Drop the fence's own indentation (a block inside a list item).
            k = 0
            while k < indent and k < len(raw) and raw[k] == " ":
                k += 1
            body.append(raw[k:])
        yield i + 1, info, marker, "\n".join(body) + "\n"
        i = j + 1


def dangling_markers(text):
    """Lines (1-based) of runnable markers that are not just before a fence."""
    lines = text.split("\n")
    fenced = set()
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if m:
            fence = m.group(2)
            close = re.compile(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence))
            j = i + 1
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            fenced.update(range(i, min(j, len(lines) - 1) + 1))
            i = j + 1
        else:
            i += 1
    out = []
    for n, line in enumerate(lines):
        if n in fenced or not MARKER.match(line.strip()):
            continue
        if n + 1 >= len(lines) or not FENCE_OPEN.match(lines[n + 1]):
            out.append(n + 1)
    return out


def extract(path, doc):
    """(runnable blocks, problems, {lang: is the first block of lang runnable})."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks, problems, first = [], [], {}
    for line, info, marker, body in code_blocks(text):
        lang = FENCE_LANG.get(info.lower())
        if lang and lang not in first:
            first[lang] = (line, marker is not None)
        if marker is None:
            continue
        if body is None:
            problems.append("%s:%d: runnable block has no closing fence" % (doc, line))
            continue
        b = Block(doc, line, info, marker.group(1), body)
        if b.lang is None:
            problems.append("%s:%d: runnable block of unknown language %r" % (doc, line, info))
            continue
        blocks.append(b)
    for n in dangling_markers(text):
        problems.append("%s:%d: runnable marker not followed by a code fence" % (doc, n))
    return blocks, problems, first


def tracked_docs(root):
    """Every tracked *.md file of the repository at root (relative paths)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"],
                             check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
        files = [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "build", "node_modules")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def collect_blocks(root, readmes, expect):
    """The runnable blocks of `readmes` (paths) or of every tracked *.md
    under root; problems include missing expected documents and blocks."""
    blocks, problems = [], []
    docs = [(p, os.path.relpath(os.path.abspath(p), root) if os.path.abspath(p).startswith(root + os.sep)
             else p) for p in readmes] if readmes else \
        [(os.path.join(root, d), d) for d in sorted(set(tracked_docs(root)) | set(
            d for d, _, _ in EXPECTED_DOCS if expect and os.path.isfile(os.path.join(root, d))))]
    firsts = {}
    for path, doc in docs:
        if not os.path.isfile(path):
            problems.append("%s: no such file" % doc)
            continue
        b, p, first = extract(path, doc)
        blocks += b
        problems += p
        firsts[doc] = first
    if expect:
        for doc, lang, what in EXPECTED_DOCS:
            if not os.path.isfile(os.path.join(root, doc)):
                problems.append("%s: missing (the document of %s)" % (doc, what))
                continue
            if not any(b.doc == doc for b in blocks):
                problems.append("%s: no runnable block (%s must show one)" % (doc, what))
            first = firsts.get(doc, {})
            if lang and lang not in first:
                problems.append("%s: no %s example" % (doc, lang))
            # Each language's first example in these documents is one a
            # reader copies: it must run (shell blocks: install commands
            # and the like come first, so only "at least one" above).
            for l, (line, runnable) in sorted(first.items()):
                if l != "sh" and not runnable:
                    problems.append("%s:%d: the first %s example is not marked runnable"
                                    % (doc, line, l))
    return blocks, problems


# ---------------------------------------------------------------------------
# Processes

def user_env(prefix):
    """The environment of a user's shell with the prefix installed: nothing
    that points into the repository or its build."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TURNSTILE_") and k not in ("PYTHONPATH", "NODE_PATH", "CLASSPATH")}
    env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


def lang_env(ctx, lang):
    env = user_env(ctx.prefix)
    cache = os.path.join(ctx.build, "take_home_cache", lang)
    os.makedirs(cache, exist_ok=True)
    env.update(TURNSTILE_SRC=TOP, TURNSTILE_BUILD=ctx.build, TURNSTILE_PREFIX=ctx.prefix,
               TURNSTILE_CACHE=cache)
    return env


def run_bounded(argv, cwd, env, seconds, out_path):
    """Runs argv in a process group of its own, output to out_path; kills the
    group when argv ends or after `seconds`. Returns (exit code or None on
    a timeout, elapsed seconds, output)."""
    start = time.monotonic()
    with open(out_path, "wb") as out:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(seconds)
        except subprocess.TimeoutExpired:
            rc = None
        # Whatever the program left behind (a background job) ends with it.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if rc is None:
            p.wait()
    elapsed = time.monotonic() - start
    with open(out_path, encoding="utf-8", errors="replace") as f:
        return rc, elapsed, f.read()


def tail(text, n=60):
    lines = text.rstrip("\n").split("\n")
    skipped = len(lines) - n
    body = "\n".join("    | " + l for l in lines[-n:])
    return ("    | ... (%d lines before)\n" % skipped if skipped > 0 else "") + body


def lang_script(lang):
    return os.path.join(HERE, lang + ".sh")


class Context:
    """An installed prefix and the languages set up against it."""

    def __init__(self, build, tmp, prefix, work, setup):
        self.build, self.tmp, self.prefix = build, tmp, prefix
        self.work = work      # {lang: WORK dir}
        self.setup = setup    # {lang: {"ok": bool, "seconds": s, "log": path, "why": str}}
        self._n = 0

    def fresh_dir(self, tag):
        self._n += 1
        d = os.path.join(self.tmp, "runs", "%03d-%s" % (self._n, re.sub(r"[^\w.-]", "_", tag)))
        os.makedirs(d)
        return d

    def to_state(self):
        return {"build": self.build, "tmp": self.tmp, "prefix": self.prefix,
                "work": self.work, "setup": self.setup}


def state_path(build):
    return os.path.join(build, "take_home", "state.json")


def make_tmp():
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="turnstile-take-home-"))
    if (tmp + os.sep).startswith(TOP + os.sep):
        raise Failure("the temp dir %s is inside the repository: set TMPDIR elsewhere" % tmp)
    return tmp


def install(build, tmp):
    prefix = os.path.join(tmp, "prefix")
    start = time.monotonic()
    r = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0:
        raise Failure("cmake --install %s --prefix %s failed:\n%s" % (build, prefix, tail(r.stdout)))
    for exe in ("turnstiled", "turnstile"):
        if not os.access(os.path.join(prefix, "bin", exe), os.X_OK):
            raise Failure("the install put no bin/%s in the prefix" % exe)
    log("installed %s into %s (%.1f s)" % (build, prefix, time.monotonic() - start))
    return prefix


def set_up(ctx, langs):
    logs = os.path.join(ctx.build, "take_home", "logs")
    os.makedirs(logs, exist_ok=True)
    for lang in langs:
        if lang in ctx.setup:
            continue
        script = lang_script(lang)
        entry = {"ok": False, "seconds": 0.0, "log": os.path.join(logs, lang + "-setup.log"), "why": ""}
        ctx.setup[lang] = entry
        if not os.access(script, os.X_OK):
            entry["why"] = "tests/take_home/%s.sh is missing or not executable" % lang
            log("setup %-14s FAIL %s" % (lang, entry["why"]))
            continue
        work = os.path.join(ctx.tmp, "work", lang)
        os.makedirs(work)
        ctx.work[lang] = work
        rc, secs, out = run_bounded(["bash", script, "setup", work], work, lang_env(ctx, lang),
                                    SETUP_SECONDS, entry["log"])
        entry["seconds"] = round(secs, 1)
        if rc == 0:
            entry["ok"] = True
            log("setup %-14s ok   %6.1f s" % (lang, secs))
        else:
            entry["why"] = ("timed out after %d s" % SETUP_SECONDS if rc is None
                            else "exit code %d" % rc) + " (log: %s)" % entry["log"]
            log("setup %-14s FAIL %6.1f s: %s\n%s" % (lang, secs, entry["why"], tail(out, 40)))


class Stack:
    """One ZooKeeper and one SERVING turnstiled from the prefix."""

    def __init__(self, ctx):
        # conformance.Replica finds turnstiled and turnstile in a build
        # tree's layout (server/, client/): give it the installed ones.
        layout = os.path.join(ctx.tmp, "stack-%d" % os.getpid())
        for sub, exe in (("server", "turnstiled"), ("client", "turnstile")):
            os.makedirs(os.path.join(layout, sub), exist_ok=True)
            os.symlink(os.path.join(ctx.prefix, "bin", exe), os.path.join(layout, sub, exe))
        self.zk, self.replica = None, None
        try:
            self.zk = conformance.ZooKeeper(layout)
            self.replica = conformance.Replica(layout, self.zk, "/take-home-%d" % os.getpid(), 0)
            self.replica.wait_serving(layout, user_env(ctx.prefix), within_s=60)
        except BaseException:
            self.stop()
            raise
        self.address = self.replica.address
        log("stack: ZooKeeper %s, turnstiled %s (SERVING)" % (self.zk.connect, self.address))

    def stop(self):
        if self.replica is not None:
            self.replica.stop()
        if self.zk is not None:
            self.zk.stop()


def run_program(ctx, stack, lang, name, text, tag):
    """Writes text (address substituted) as `name` in a fresh dir and runs it
    as `lang`; returns (exit code or None, seconds, output, where it ran)."""
    d = ctx.fresh_dir(tag)
    src = os.path.join(d, "src")
    os.makedirs(src)
    path = os.path.join(src, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(DEFAULT_ADDRESS, stack.address))
    cwd = os.path.join(d, "cwd")
    os.makedirs(cwd)
    out = os.path.join(d, "output.txt")
    if lang == "sh":
        return run_bounded(["bash", "-e", path], cwd, user_env(ctx.prefix), BLOCK_SECONDS, out) + (d,)
    s = ctx.setup.get(lang)
    if not s or not s["ok"]:
        why = s["why"] if s else "not set up"
        return 1, 0.0, "the %s setup failed: %s" % (lang, why), d
    seconds = BLOCK_SECONDS + BUILD_ALLOWANCE[lang]
    return run_bounded(["bash", lang_script(lang), "run", ctx.work[lang], path], cwd,
                       lang_env(ctx, lang), seconds, out) + (d,)


def outcome(rc):
    if rc is None:
        return "timed out"
    return "exit code %d" % rc


# Programs that end with exit code 3, and programs that do not build: what
# `LANG.sh run` must report for docs_test to be able to fail at all.
EXIT3 = {
    "cpp": ("main.cc", "int main() { return 3; }\n"),
    "python": ("main.py", "import sys\nsys.exit(3)\n"),
    "node": ("main.js", "process.exit(3);\n"),
    "java": ("Exit3.java", "public class Exit3 {\n  public static void main(String[] a) "
             "{ System.exit(3); }\n}\n"),
    "go": ("main.go", "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(3) }\n"),
}
EXIT3["cpp-pkgconfig"] = EXIT3["cpp"]
BROKEN = {
    "cpp": ("main.cc", "int main() { return no_such_name; }\n"),
    "java": ("Broken.java", "public class Broken {\n  public static void main(String[] a) "
             "{ no_such_name(); }\n}\n"),
    "go": ("main.go", "package main\n\nfunc main() { noSuchName() }\n"),
}
BROKEN["cpp-pkgconfig"] = BROKEN["cpp"]


def check_runners(ctx, stack, langs):
    """`LANG.sh run` passes a program's exit code through, and fails on a
    program that does not build: else a broken block would pass."""
    failures = []
    for lang in langs:
        if not ctx.setup.get(lang, {}).get("ok"):
            continue  # reported with the consumer
        for what, table, want in (("exit code 3", EXIT3, 3), ("a build error", BROKEN, None)):
            if lang not in table:
                continue
            name, text = table[lang]
            rc, secs, out, d = run_program(ctx, stack, lang, name, text, "check-" + lang)
            ok = rc == want if want is not None else rc not in (0, None)
            log("%s.sh run with %s: %s (%.1f s)" % (lang, what, "ok, " + outcome(rc) if ok
                                                   else "FAIL, " + outcome(rc), secs))
            if not ok:
                failures.append("%s.sh run does not report %s (%s)\n%s"
                                % (lang, what, outcome(rc), tail(out, 20)))
    return failures


# ---------------------------------------------------------------------------
# Modes

def mode_consumers(ctx, stack, langs):
    rows, failures, last = [], [], None
    for lang in langs:
        for name in CONSUMERS[lang]:
            label = "%s (%s)" % (lang, name)
            path = os.path.join(HERE, name)
            if not os.path.isfile(path):
                rows.append((label, "-", "-", "FAIL: tests/take_home/%s is missing" % name))
                failures.append(label)
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            rc, secs, out, d = run_program(ctx, stack, lang, name, text, "consumer-" + lang)
            tokens = [l.strip() for l in out.splitlines() if l.strip().startswith("fencing_token")]
            why, token = None, None
            if rc != 0:
                why = outcome(rc)
            elif len(tokens) != 1:
                why = "%d fencing_token lines, not one" % len(tokens)
            else:
                m = re.fullmatch(r"fencing_token=([0-9]+)", tokens[0])
                if not m or int(m.group(1)) <= 0:
                    why = "not a positive decimal token: %r" % tokens[0]
                else:
                    token = int(m.group(1))
                    # czxids of one ZooKeeper: later consumers, later transactions.
                    if last is not None and token <= last:
                        why = "token %d is not above the previous consumer's %d" % (token, last)
                    last = token
            rows.append((label, "%.1f s" % secs, str(token) if token else "-",
                         "ok" if why is None else "FAIL: " + why))
            log("consumer %s: %s (%.1f s)\n%s" % (label, "ok" if why is None else "FAIL: " + why,
                                                  secs, tail(out, 40 if why else 10)))
            if why is not None:
                failures.append(label)
    log("\ntake-home consumers (installed prefix, projects outside the repository):")
    log("  %-28s %-10s %-9s %-22s %s" % ("language (program)", "setup", "run", "fencing token", "result"))
    for label, secs, token, res in rows:
        lang = label.split(" ")[0]
        s = ctx.setup.get(lang, {})
        setup = "%.1f s" % s["seconds"] if s.get("ok") else "FAIL"
        log("  %-28s %-10s %-9s %-22s %s" % (label, setup, secs, token, res))
    return failures


def mode_docs(ctx, stack, blocks, problems, langs):
    failures = list(problems)
    results = []
    for p in problems:
        log("docs FAIL %s" % p)
    for b in blocks:
        if b.lang not in langs:
            results.append((b, "skipped (%s not selected)" % b.lang, 0.0))
            continue
        try:
            name = b.file_name()
        except Failure as e:
            results.append((b, "FAIL: %s" % e, 0.0))
            failures.append("%s: %s" % (b.where, e))
            continue
        rc, secs, out, d = run_program(ctx, stack, b.lang, name, b.text, b.doc + "-" + str(b.line))
        if rc == 0:
            results.append((b, "pass", secs))
            log("docs pass %s [%s as %s] %.1f s" % (b.where, b.info, name, secs))
        else:
            why = outcome(rc)
            results.append((b, "FAIL: " + why, secs))
            failures.append("%s [%s]: %s" % (b.where, b.info, why))
            log("docs FAIL %s [%s as %s] %.1f s: %s (ran in %s)\n%s"
                % (b.where, b.info, name, secs, why, d, tail(out)))
    log("\nrunnable documentation blocks (%d):" % len(blocks))
    for b, res, secs in results:
        log("  %-36s %-8s %6.1f s  %s" % (b.where, b.info, secs, res))
    return failures


def github_slug(heading, seen):
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = t.replace("`", "").strip().lower()
    t = re.sub(r"[^\w\- ]", "", t).replace(" ", "-")
    n = seen.get(t, 0)
    seen[t] = n + 1
    return t if n == 0 else "%s-%d" % (t, n)


def lint(root, readme=None, docs=None):
    """Problems with README length, its contents list, and issue numbers."""
    problems = []
    readme = readme or os.path.join(root, "README.md")
    if not os.path.isfile(readme):
        return ["%s: missing" % readme]
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > README_MAX_LINES:
        problems.append("%s: %d lines, more than %d" % (readme, len(lines), README_MAX_LINES))
    # Headings outside fences.
    headings, in_fence = [], None
    for n, line in enumerate(lines):
        m = FENCE_OPEN.match(line)
        if in_fence:
            if re.match(r"^\s*" + re.escape(in_fence[0]) + "{%d,}\\s*$" % len(in_fence), line):
                in_fence = None
            continue
        if m:
            in_fence = m.group(2)
            continue
        h = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if h:
            headings.append((n, len(h.group(1)), h.group(2)))
    seen, slugs = {}, {}
    for n, level, title in headings:
        slugs[n] = github_slug(title, seen)
    toc = [(n, lvl) for n, lvl, t in headings
           if lvl == 2 and re.fullmatch(r"(table of )?contents", t.strip().lower())]
    if not toc:
        problems.append("%s: no table of contents (a `## Contents` heading)" % readme)
    else:
        start = toc[0][0]
        end = next((n for n, lvl, t in headings if n > start and lvl <= 2), len(lines))
        links = re.findall(r"^\s*(?:[-*+]|\d+\.)\s+\[[^\]]+\]\(#([^)\s]+)\)", "\n".join(lines[start + 1:end]), re.M)
        anchors = set(slugs.values())
        for a in links:
            if a not in anchors:
                problems.append("%s: the contents link #%s names no heading" % (readme, a))
        for n, level, title in headings:
            if level == 2 and n != start and slugs[n] not in links:
                problems.append("%s:%d: the contents do not link the section %r (#%s)"
                                % (readme, n + 1, title, slugs[n]))
        if not links:
            problems.append("%s:%d: the contents list has no #links" % (readme, start + 1))
    # No issue numbers in any user document, by grep -rn as the issue says.
    if docs is None:
        docs = sorted(set(tracked_docs(root)) | set(
            d for d, _, _ in EXPECTED_DOCS if os.path.isfile(os.path.join(root, d))))
        docs = [os.path.join(root, d) for d in docs]
    files = docs
    if files:
        r = subprocess.run(["grep", "-rniE", ISSUE_PATTERN] + files, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode == 0:
            for hit in r.stdout.splitlines():
                problems.append("issue number in a user document: %s" % hit)
        elif r.returncode != 1:
            problems.append("grep failed: %s" % r.stdout.strip())
    # No command in a code block starts with a bare sudo: it fails for root
    # on a machine without sudo (a container, CI). Say "with sudo unless run
    # as root" in the text instead.
    for path in files:
        if not path.endswith(".md") or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            fence = None
            for n, line in enumerate(f.read().split("\n"), 1):
                m = FENCE_OPEN.match(line)
                if fence:
                    if re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), line):
                        fence = None
                    elif re.match(r"^\s*(\$\s+)?sudo\s", line):
                        problems.append("%s:%d: a command starts with sudo (fails for root "
                                        "without sudo): %s" % (path, n, line.strip()))
                    continue
                if m:
                    fence = m.group(2)
    return problems


# Facts the documents repeat from the code.
EXIT_CODES_DOC = "client/README.md"
EXIT_CODES_SRC = "client/cli_common.h"
INSTALL_TABLE_DOC = "client/lib/README.md"


def section(text, heading):
    """The lines of the `## heading` section of a Markdown text."""
    out, inside = [], False
    for line in text.split("\n"):
        if re.match(r"^##\s", line):
            inside = line[2:].strip().lower() == heading.lower()
            continue
        if inside:
            out.append(line)
    return out


def installed_files(root):
    """What `cmake --install` puts under the prefix, from the install()
    rules of every CMakeLists.txt under root: bin/PROGRAM, lib/libNAME.a
    and include/turnstile/HEADER (relative to the prefix)."""
    found = []
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "CMakeLists.txt",
                              "*/CMakeLists.txt"], check=True, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL).stdout
        lists = [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        lists = []
    if not lists:  # not a git checkout (the self-test's tree)
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "build", "node_modules")]
            if "CMakeLists.txt" in names:
                lists.append(os.path.relpath(os.path.join(d, "CMakeLists.txt"), root))
    for rel in sorted(lists):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = re.sub(r"#[^\n]*", "", f.read())
        for m in re.finditer(r"\binstall\s*\(([^)]*)\)", text):
            words = m.group(1).split()
            if not words:
                continue
            kind, args = words[0], words[1:]
            stop = {"EXPORT", "RUNTIME", "ARCHIVE", "LIBRARY", "DESTINATION", "NAMESPACE",
                    "INCLUDES", "PUBLIC_HEADER", "COMPONENT"}
            items = []
            for w in args:
                if w in stop:
                    break
                items.append(w)
            dests = [args[i + 1] for i, w in enumerate(args[:-1]) if w == "DESTINATION"]
            if kind == "TARGETS":
                for t in items:
                    if "RUNTIME" in args:
                        found.append("bin/" + t)
                    if "ARCHIVE" in args:
                        found.append("lib/lib%s.a" % t)
            elif kind == "FILES" and dests and dests[0].endswith("/turnstile") \
                    and "INCLUDEDIR" in dests[0]:
                found += ["include/turnstile/" + os.path.basename(h) for h in items]
    return sorted(set(found))


def doc_facts(root):
    """Problems where a document disagrees with the code it describes: the
    CLI's exit codes (client/cli_common.h) missing from client/README.md's
    exit-code table; installed files missing from client/lib/README.md's
    install table, installed programs missing from README.md."""
    problems = []

    def read(rel):
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                return f.read()
        except OSError:
            problems.append("%s: missing" % rel)
            return None

    src, doc = read(EXIT_CODES_SRC), read(EXIT_CODES_DOC)
    if src is not None and doc is not None:
        codes = {int(c): n for n, c in re.findall(r"constexpr\s+int\s+(kExit\w+)\s*=\s*(\d+)\s*;", src)}
        if not codes:
            problems.append("%s: no kExit... constants found" % EXIT_CODES_SRC)
        rows = set()
        for line in section(doc, "Exit codes"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.lstrip().startswith("|") and cells:
                rows.update(int(n) for n in re.findall(r"\b\d+\b", cells[0]))
        if not rows:
            problems.append("%s: no `## Exit codes` table" % EXIT_CODES_DOC)
        for code, name in sorted(codes.items()):
            if rows and code not in rows:
                problems.append("%s: the exit-code table has no row for %d (%s in %s)"
                                % (EXIT_CODES_DOC, code, name, EXIT_CODES_SRC))

    files = installed_files(root)
    table, readme = read(INSTALL_TABLE_DOC), read("README.md")
    if table is not None:
        rows = "\n".join(l for l in table.split("\n") if l.lstrip().startswith("|"))
        for f in files:
            # A row may name a file by its path, or by its name after the
            # first path of a cell (`include/turnstile/client.h`, `tls.h`).
            if "`%s`" % f not in rows and not ("/" in f and f.startswith("include/") and
                                               "`%s`" % os.path.basename(f) in rows):
                problems.append("%s: the install table does not list `%s` (cmake --install "
                                "installs it)" % (INSTALL_TABLE_DOC, f))
    if readme is not None:
        for f in files:
            if f.startswith("bin/") and "`%s`" % f not in readme:
                problems.append("README.md: the install section does not name `%s` "
                                "(cmake --install installs it)" % f)
    return problems


# ---------------------------------------------------------------------------
# The harness's own test

SELFTEST_README = """# A document with a broken runnable block

<!-- runnable -->
```sh
test "127.0.0.1:7400" != "127.0.0.1:74""00"  # the address was substituted
turnstile --server 127.0.0.1:7400 health
```

Text with a fence that is not runnable:

```sh
false
```

<!-- runnable as broken.sh -->
```bash
turnstile --server 127.0.0.1:7400 health
turnstile --server 127.0.0.1:7400 no-such-subcommand
echo "not reached"
```

<!-- runnable -->

A marker above this line has no fence after it.
"""


def selftest_doc_facts(root):
    """doc_facts flags an exit code without a row and an installed program
    missing from the install table and README.md, and passes them once
    documented. Returns the self-test's errors."""
    files = {
        "client/cli_common.h": "constexpr int kExitUsage = 2;\nconstexpr int kExitCannotRun = 127;\n",
        "CMakeLists.txt": "add_subdirectory(tools)\n",
        "tools/CMakeLists.txt": "# install(TARGETS commented RUNTIME DESTINATION bin)\n"
                                "install(TARGETS tool other RUNTIME DESTINATION bin)\n",
        "client/README.md": "# t\n\n## Exit codes\n\n| code | meaning |\n|---|---|\n| 2 | usage |\n"
                            "\n## Next\n\n| 127 | not in the exit-code section |\n",
        "client/lib/README.md": "| Path | What |\n|---|---|\n| `bin/tool` | a tool |\n\n`bin/other`\n",
        "README.md": "This installs `bin/tool`.\n",
    }
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    errors = []
    found = doc_facts(root)
    want = ["client/README.md: the exit-code table has no row for 127",
            "client/lib/README.md: the install table does not list `bin/other`",
            "README.md: the install section does not name `bin/other`"]
    for w in want:
        if not any(p.startswith(w) for p in found):
            errors.append("doc_facts did not report %r: %r" % (w, found))
    if len(found) != len(want):
        errors.append("doc_facts reported %r, expected only %r" % (found, want))
    with open(os.path.join(root, "client/README.md"), "a") as f:
        f.write("\n## Exit codes\n\n| 127 | CMD could not be started |\n")
    with open(os.path.join(root, "client/lib/README.md"), "a") as f:
        f.write("| `bin/other` | another |\n")
    with open(os.path.join(root, "README.md"), "a") as f:
        f.write("And `bin/other`.\n")
    if doc_facts(root):
        errors.append("doc_facts refused documents that match: %r" % doc_facts(root))
    return errors


def selftest(build):
    """The docs mode fails on a broken block and names it (file:line), passes
    a good one only with the address substituted, flags a stray marker and
    missing documents; lint flags a long README without contents and an
    issue number, doc_facts an undocumented exit code or installed file."""
    errors = []
    tmp = make_tmp()
    try:
        docdir = os.path.join(tmp, "doc")
        os.makedirs(docdir)
        readme = os.path.join(docdir, "README.md")
        with open(readme, "w") as f:
            f.write(SELFTEST_README)
        blocks, problems = collect_blocks(docdir, [readme], expect=False)
        if [(b.line, b.info) for b in blocks] != [(4, "sh"), (16, "bash")]:
            errors.append("extracted %r, not the blocks at lines 4 and 16"
                          % [(b.line, b.info) for b in blocks])
        if not any(":22: runnable marker not followed" in p for p in problems):
            errors.append("the stray marker at line 22 was not reported: %r" % problems)
        os.makedirs(os.path.join(docdir, "client", "python"))
        with open(os.path.join(docdir, "client", "python", "README.md"), "w") as f:
            f.write("# x\n\n```python\nimport turnstile\n```\n\n<!-- runnable -->\n```python\npass\n```\n")
        _, missing = collect_blocks(docdir, None, expect=True)
        if "client/python/README.md:3: the first python example is not marked runnable" not in missing:
            errors.append("an unmarked first python example was not reported: %r" % missing)
        for doc, _, _ in EXPECTED_DOCS[1:]:
            if doc != "client/python/README.md" and not any(p.startswith(doc + ": missing") for p in missing):
                errors.append("a missing %s was not reported" % doc)

        long_readme = os.path.join(tmp, "long.md")
        with open(long_readme, "w") as f:
            f.write("# t\n\n## Usage\n\nSee Issue 12 for why.\n" + "x\n" * 400)
        found = lint(tmp, long_readme, [long_readme])
        for what in ("more than %d" % README_MAX_LINES, "no table of contents", "issue number"):
            if not any(what in p for p in found):
                errors.append("lint did not report %r on %s: %r" % (what, long_readme, found))
        good = os.path.join(tmp, "good.md")
        with open(good, "w") as f:
            f.write("# t\n\n## Contents\n\n- [Usage](#usage)\n- [The `turnstile` CLI](#the-turnstile-cli)"
                    "\n\n## Usage\n\nx\n\n## The `turnstile` CLI\n\nIssue-free.\n")
        if lint(tmp, good, [good]):
            errors.append("lint refused a good document: %r" % lint(tmp, good, [good]))
        errors += selftest_doc_facts(os.path.join(tmp, "facts"))

        ctx = Context(build, tmp, install(build, tmp), {}, {})
        stack = Stack(ctx)
        try:
            failures = mode_docs(ctx, stack, blocks, [], {"sh"})
        finally:
            stack.stop()
        if not any(f.startswith("README.md:16 [bash]: exit code") for f in failures):
            errors.append("the broken block (line 16) was not reported failing: %r" % failures)
        if any(":4 [sh]" in f for f in failures):
            errors.append("the good block (line 4) failed: is the address substituted?")
        if len(failures) != 1:
            errors.append("expected exactly one failing block, got %r" % failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for e in errors:
        log("selftest FAIL: %s" % e)
    if not errors:
        log("selftest: PASS (a broken runnable block fails, named by file:line; a good one passes;"
            " stray markers, missing documents, a long README without contents, an issue"
            " number, an exit code without a row and an installed program not listed are all"
            " reported)")
    return 1 if errors else 0


# ---------------------------------------------------------------------------

def load_state(build):
    try:
        with open(state_path(build)) as f:
            s = json.load(f)
    except (OSError, ValueError):
        raise Failure("no setup at %s: run `take_home.py --build %s setup` first "
                      "(ctest: the take_home_setup fixture)" % (state_path(build), build))
    if not os.path.isdir(s["prefix"]):
        raise Failure("the setup's prefix %s is gone: run setup again" % s["prefix"])
    return Context(s["build"], s["tmp"], s["prefix"], s["work"], s["setup"])


def remove_setup(build):
    try:
        with open(state_path(build)) as f:
            old = json.load(f)["tmp"]
        if os.path.basename(old).startswith("turnstile-take-home-"):
            shutil.rmtree(old, ignore_errors=True)
    except (OSError, ValueError, KeyError):
        pass
    try:
        os.remove(state_path(build))
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", help="the build dir (configured and built)")
    ap.add_argument("mode", choices=["all", "setup", "consumers", "docs", "cleanup", "lint", "selftest"])
    ap.add_argument("--use-setup", action="store_true",
                    help="use what `setup` made (BUILD/take_home/state.json)")
    ap.add_argument("--langs", default=",".join(LANGS),
                    help="languages to set up and run (comma-separated; default all)")
    ap.add_argument("--readme", action="append",
                    help="docs/lint: only this Markdown file (repeatable); skips the "
                         "check that the expected documents show runnable blocks")
    ap.add_argument("--root", default=TOP, help="lint: the repository root")
    args = ap.parse_args()
    langs = [l for l in args.langs.split(",") if l]
    for l in langs:
        if l not in LANGS and l != "sh":
            ap.error("unknown language %r" % l)
    if args.mode not in ("lint",) and not args.build:
        ap.error("--build is required")
    build = os.path.realpath(args.build) if args.build else None

    if args.mode == "lint":
        if args.readme:
            problems = []
            for r in args.readme:
                problems += lint(args.root, r, [r])
        else:
            problems = lint(os.path.realpath(args.root)) + doc_facts(os.path.realpath(args.root))
        for p in problems:
            log("lint FAIL %s" % p)
        if not problems:
            log("lint: README.md is at most %d lines with a contents list; no user document "
                "names an issue number; the exit-code and install tables match the code; no "
                "command starts with a bare sudo" % README_MAX_LINES)
        return 1 if problems else 0
    if args.mode == "selftest":
        return selftest(build)
    if args.mode == "cleanup":
        remove_setup(build)
        log("removed the take-home setup")
        return 0
    if args.mode == "setup":
        remove_setup(build)
        tmp = make_tmp()
        ctx = Context(build, tmp, install(build, tmp), {}, {})
        os.makedirs(os.path.dirname(state_path(build)), exist_ok=True)
        set_up(ctx, [l for l in langs if l != "sh"])
        with open(state_path(build), "w") as f:
            json.dump(ctx.to_state(), f, indent=1)
        # A language whose setup failed fails the consumers and its docs
        # blocks (there, by name); the fixture itself stands for the install.
        return 0

    own = not args.use_setup
    ctx = None
    failures = []
    try:
        if own:
            tmp = make_tmp()
            ctx = Context(build, tmp, install(build, tmp), {}, {})
        else:
            ctx = load_state(build)
        blocks, problems = [], []
        if args.mode in ("docs", "all"):
            readmes = [os.path.abspath(r) for r in args.readme] if args.readme else None
            blocks, problems = collect_blocks(TOP, readmes, expect=not readmes)
        need = [l for l in LANGS if l in langs and
                (args.mode in ("consumers", "all") or any(b.lang == l for b in blocks))]
        if own:
            set_up(ctx, need)
        stack = Stack(ctx)
        try:
            if args.mode in ("consumers", "all"):
                chosen = [l for l in LANGS if l in langs]
                failures += ["consumer " + f for f in mode_consumers(ctx, stack, chosen)]
                failures += check_runners(ctx, stack, chosen)
            if args.mode in ("docs", "all"):
                failures += ["docs " + f for f in mode_docs(ctx, stack, blocks, problems,
                                                             set(langs) | {"sh"})]
        finally:
            stack.stop()
    except Failure as e:
        failures.append(str(e))
    finally:
        if own and ctx is not None:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
    log("")
    for f in failures:
        log("FAIL %s" % f)
    log("%s: %s" % (args.mode, "PASS" if not failures else "%d failure(s)" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
