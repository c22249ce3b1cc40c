#!/usr/bin/python3
"""Checker of the partition fault suite (tests/nemesis).

    check_history.py RUN_DIR      analyse a recorded run (exit 1 on violations)
    check_history.py --self-test  show on synthetic histories that each check
                                  finds what it must (and a clean one passes)

A run directory holds (written by run_nemesis.py and nemesis_client):
  meta.json                 session timeout, heal slack, seed, ...
  history/<client>.jsonl    each careful client's events (CLOCK_MONOTONIC ns)
  register/<lock>.reglog    every operation on the fenced register of a lock
  nemesis.jsonl             fault inject/heal times, client kills, progress
  final.json                end probes: orphan contender nodes, replica health

Violations (each must be 0; any one makes the exit status 1):
  overlap          two holds of one lock whose use intervals overlap (use
                   interval = first register-op start .. last register-op end)
  lost_update      an accepted write whose previous register value is not the
                   value that hold last read or wrote
  token_order      fencing tokens of a lock not strictly increasing in grant
                   order (a repeated token included)
  wrong_lost_reason  LOST(DELETED) told to a holder: nothing in this workload
                   releases by lease id or deletes nodes
  late_notice      a holder neither told SUSPENDED/LOST nor past the validity
                   it was given, nor done with the hold, when another holder
                   of the same lock was granted
  validity_broken  a holder given a validity (valid_for) that covered the
                   moment another holder of the same lock was granted
  heal_to_grant    no grant within session timeout + slack of a heal that
                   left no fault active (the last heal of overlapping faults)
  no_progress      the orchestrator saw no grant after a heal before its deadline
  crash            a ZooKeeper member, replica or client exited without being
                   killed by the nemesis
  orphans          contender nodes left in ZooKeeper after all clients stopped
  not_serving      a replica not SERVING at the end
Reported (not violations): register ops rejected by fencing, grants, holds,
faults injected per kind, max heal-to-grant time.

Probe used by the orchestrator at the end (inside the lab's client
namespace): zk_contender_nodes() (kazoo). Replica health is probed with the
`turnstile health` CLI in a subprocess (run_nemesis.py).
"""

import json
import os
import shutil
import sys
import tempfile

NS = 1_000_000_000
INF = float("inf")


# ---------------------------------------------------------------- probes
def zk_contender_nodes(hosts, root="/turnstile", timeout=10.0):
    """Every child of every lock node under root: [path, ...]."""
    from kazoo.client import KazooClient  # Debian's python3-kazoo
    import logging
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 3})
    zk.start(timeout=timeout)
    try:
        out = []
        if not zk.exists(root):
            return out
        for lock in zk.get_children(root):
            for child in zk.get_children(root + "/" + lock):
                out.append("%s/%s/%s" % (root, lock, child))
        return out
    finally:
        zk.stop()
        zk.close()


# ---------------------------------------------------------------- loading
def read_jsonl(path, bad):
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    bad.append("%s:%d" % (path, n))
    except FileNotFoundError:
        pass
    return out


class Run:
    def __init__(self, run_dir):
        self.dir = run_dir
        self.bad_lines = []
        with open(os.path.join(run_dir, "meta.json")) as f:
            self.meta = json.load(f)
        self.events = []  # client events
        hdir = os.path.join(run_dir, "history")
        for name in sorted(os.listdir(hdir)) if os.path.isdir(hdir) else []:
            if name.endswith(".jsonl"):
                self.events += read_jsonl(os.path.join(hdir, name), self.bad_lines)
        self.reglog = {}  # lock -> [entries]
        rdir = os.path.join(run_dir, "register")
        for name in sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []:
            if name.endswith(".reglog"):
                self.reglog[name[:-len(".reglog")]] = read_jsonl(os.path.join(rdir, name),
                                                                  self.bad_lines)
        self.nemesis = read_jsonl(os.path.join(run_dir, "nemesis.jsonl"), self.bad_lines)
        fp = os.path.join(run_dir, "final.json")
        self.final = None
        if os.path.exists(fp):
            with open(fp) as f:
                self.final = json.load(f)


class Hold:
    def __init__(self, hid):
        self.id = hid
        self.lock = None
        self.client = None
        self.pid = None
        self.replica = None
        self.token = None
        self.grant_t = None
        self.ops = []  # [start_t, end_t or None, op, accepted or None, valid_ms]
        self.promises = []  # (t, deadline_t)
        self.notice_t = INF  # first moment the holder knew (or stopped)
        self.notice_what = None
        self.events = []

    def note(self, t, what):
        if t < self.notice_t:
            self.notice_t, self.notice_what = t, what


def build_holds(run):
    kills = {}  # pid -> kill time
    for e in run.nemesis:
        if e.get("ev") == "kill_client":
            kills[e["pid"]] = min(kills.get(e["pid"], INF), e["t"])
    holds = {}
    for e in sorted(run.events, key=lambda e: e["t"]):
        hid = e.get("hold")
        if hid is None:
            continue
        h = holds.setdefault(hid, Hold(hid))
        h.events.append(e)
        h.client, h.pid = e.get("client"), e.get("pid")
        if e.get("lock"):
            h.lock = e["lock"]
        ev = e["ev"]
        if ev == "grant":
            h.token, h.grant_t, h.replica = e["token"], e["t"], e.get("replica")
            if e.get("valid_ms", -1) >= 0:
                h.promises.append((e["t"], e["t"] + e["valid_ms"] * 1_000_000))
        elif ev == "op_start":
            h.ops.append([e["t"], None, e["op"], None, e.get("valid_ms", -1)])
            if e.get("valid_ms", -1) >= 0:
                h.promises.append((e["t"], e["t"] + e["valid_ms"] * 1_000_000))
        elif ev == "op_end":
            for op in reversed(h.ops):
                if op[1] is None:
                    op[1], op[3] = e["t"], e.get("accepted")
                    break
        elif ev == "change":
            st = e.get("state")
            if st in ("SUSPENDED", "kSuspended", "LOST", "kLost", "RELEASED", "kReleased"):
                h.note(e["t"], "told %s%s" % (st, (" " + e["reason"]) if e.get("reason") else ""))
            if st in ("SUSPENDED", "kSuspended", "HELD", "kHeld") and e.get("valid_ms", -1) >= 0:
                h.promises.append((e["t"], e["t"] + e["valid_ms"] * 1_000_000))
        elif ev == "stop_using":
            h.note(e["t"], "stopped using (%s)" % e.get("why"))
        elif ev == "release_start":
            h.note(e["t"], "began release")
    for h in holds.values():
        k = kills.get(h.pid)
        if k is not None:
            h.note(k, "client killed")
            for op in h.ops:
                if op[1] is None:
                    op[1] = k
        # An op with no end and no kill record (the client died otherwise):
        # bounded by that client's register log entry if any, else by its
        # last recorded event.
        for op in h.ops:
            if op[1] is None:
                op[1] = max(x["t"] for x in h.events)
        # A finite validity the holder was given ends its knowledge too: a
        # holder that honours valid_for knows it is not valid past it.
        if h.promises:
            last_deadline = h.promises[-1][1]
            h.note(last_deadline, "validity it was given ran out")
    return holds, kills


# ---------------------------------------------------------------- checks
class Violation:
    def __init__(self, kind, t, text, lock=None):
        self.kind, self.t, self.text, self.lock = kind, t, text, lock


def fmt_t(t, t0):
    return "%9.3fs" % ((t - t0) / NS)


def analyse(run):
    meta = run.meta
    t0 = meta.get("t0", 0)
    holds, kills = build_holds(run)
    v = []
    stats = {}
    granted = [h for h in holds.values() if h.grant_t is not None]
    by_lock = {}
    for h in granted:
        by_lock.setdefault(h.lock, []).append(h)
    stats["grants"] = len(granted)
    stats["grants_per_lock"] = {k: len(x) for k, x in sorted(by_lock.items())}
    stats["holds_with_ops"] = sum(1 for h in granted if h.ops)
    stats["register_ops"] = sum(len(h.ops) for h in granted)

    for lock, hs in sorted(by_lock.items()):
        # 1. Overlapping use.
        used = sorted((h for h in hs if h.ops), key=lambda h: h.ops[0][0])
        cur = None  # hold whose use ends last so far
        for h in used:
            start, end = h.ops[0][0], max(op[1] for op in h.ops)
            if cur is not None:
                cur_end = max(op[1] for op in cur.ops)
                if start < cur_end:
                    v.append(Violation(
                        "overlap", start,
                        "lock %s: hold %s (token %s, %s) used the register from %s while hold %s "
                        "(token %s, %s) used it until %s (%.0f ms overlap)" % (
                            lock, h.id, h.token, h.replica, fmt_t(start, t0), cur.id, cur.token,
                            cur.replica, fmt_t(cur_end, t0), (min(cur_end, end) - start) / 1e6),
                        lock))
                if end > cur_end:
                    cur = h
            else:
                cur = h

        # 2. Tokens strictly increasing in grant order.
        order = sorted(hs, key=lambda h: h.grant_t)
        for a, b in zip(order, order[1:]):
            if not b.token > a.token:
                v.append(Violation(
                    "token_order", b.grant_t,
                    "lock %s: hold %s granted at %s with token %s after hold %s granted at %s "
                    "with token %s" % (lock, b.id, fmt_t(b.grant_t, t0), b.token, a.id,
                                       fmt_t(a.grant_t, t0), a.token), lock))

        # 3. Told in time / validity kept: for each grant g of hold b, every
        # earlier-granted hold a must have known by g.
        for i, b in enumerate(order):
            g = b.grant_t
            for a in order[:i]:
                if a.notice_t <= g or a.grant_t >= g:
                    continue
                v.append(Violation(
                    "late_notice", g,
                    "lock %s: hold %s (token %s, %s) was granted at %s while hold %s (token %s, "
                    "%s) had not been told: %s came only at %s (%.0f ms later)" % (
                        lock, b.id, b.token, b.replica, fmt_t(g, t0), a.id, a.token, a.replica,
                        a.notice_what or "nothing",
                        fmt_t(a.notice_t, t0) if a.notice_t < INF else "never",
                        ((a.notice_t - g) / 1e6) if a.notice_t < INF else INF), lock))
            for a in order[:i]:
                if a.grant_t >= g:
                    continue
                # End of a's reliance: when it stopped/was told/killed.
                end = INF
                for e in a.events:
                    if e["ev"] in ("stop_using", "release_start") or (
                            e["ev"] == "change" and e.get("state") in ("LOST", "kLost")):
                        end = min(end, e["t"])
                if a.pid in kills:
                    end = min(end, kills[a.pid])
                for (pt, deadline) in a.promises:
                    if pt <= end and pt < deadline and min(deadline, end) > g and pt > a.grant_t - 1:
                        v.append(Violation(
                            "validity_broken", g,
                            "lock %s: hold %s was told at %s that it is valid for %.0f ms (until "
                            "%s), but hold %s was granted at %s" % (
                                lock, a.id, fmt_t(pt, t0), (deadline - pt) / 1e6,
                                fmt_t(deadline, t0), b.id, fmt_t(g, t0)), lock))
                        break

    # 4. Lost updates and fencing rejections, from the register logs.
    fenced = 0
    for lock, entries in sorted(run.reglog.items()):
        last = {}
        for e in sorted(entries, key=lambda e: e["t"]):
            if not e.get("accepted"):
                fenced += 1
                continue
            hid = e["hold"]
            if e["op"] == "read":
                last[hid] = e["prev"]
            else:
                if hid not in last:
                    v.append(Violation("lost_update", e["t"],
                                       "lock %s: hold %s wrote %s with no read before" % (
                                           lock, hid, e["new"]), lock))
                elif e["prev"] != last[hid]:
                    v.append(Violation(
                        "lost_update", e["t"],
                        "lock %s: hold %s (token %s) wrote %s over %s, but it last saw %s: the "
                        "update(s) in between were lost" % (lock, hid, e["token"], e["new"],
                                                            e["prev"], last[hid]), lock))
                last[hid] = e["new"]
    stats["register_ops_rejected_by_fencing"] = fenced

    # 5. Heal -> next grant; progress failures.
    grant_times = sorted(h.grant_t for h in granted)
    bound = (meta["session_timeout_ms"] + meta["heal_slack_ms"]) * 1_000_000
    worst = 0
    injected = {}
    import bisect
    # Faults injected and not yet healed: a grant is owed only once the last
    # of the faults active together is healed (a short fault healed while
    # the ensemble is still down owes nothing yet).
    active = set()
    for e in run.nemesis:
        if e.get("ev") == "inject":
            injected[e["fault"]] = injected.get(e["fault"], 0) + 1
            active.add(e.get("id"))
        if e.get("ev") == "heal":
            active.discard(e.get("id"))
            if active:
                continue
        if e.get("ev") == "crash":
            v.append(Violation("crash", e["t"], "%s (pid %s) exited on its own with status %s" % (
                e.get("name"), e.get("pid"), e.get("returncode"))))
        if e.get("ev") == "no_progress":
            v.append(Violation("no_progress", e["t"], "no grant after heal of %s (%s) within %.1f s" % (
                e.get("fault"), e.get("id"), e.get("waited_s", 0))))
        if e.get("ev") != "heal":
            continue
        h = e["t"]
        i = bisect.bisect_left(grant_times, h)
        if i == len(grant_times):
            if e.get("final"):
                continue
            v.append(Violation("heal_to_grant", h, "no grant at all after heal of %s (%s)" % (
                e.get("fault"), e.get("id"))))
            continue
        gap = grant_times[i] - h
        worst = max(worst, gap)
        if gap > bound:
            v.append(Violation("heal_to_grant", h,
                               "first grant %.2f s after heal of %s (%s); bound %.1f s" % (
                                   gap / NS, e.get("fault"), e.get("id"), bound / NS)))
    stats["faults_injected"] = dict(sorted(injected.items()))
    stats["max_heal_to_grant_s"] = round(worst / NS, 3)
    stats["heal_to_grant_bound_s"] = bound / NS

    # 6. End state.
    if run.final is None:
        v.append(Violation("not_serving", INF, "no final.json: the end probes did not run"))
    else:
        orphans = run.final.get("orphans")
        if orphans is None:
            v.append(Violation("orphans", INF, "orphan probe failed: %s" % run.final.get("orphans_error")))
        elif orphans:
            v.append(Violation("orphans", INF, "%d contender node(s) left after all clients "
                                               "stopped: %s" % (len(orphans), orphans[:10])))
        for r, st in sorted(run.final.get("health", {}).items()):
            if st != "SERVING":
                v.append(Violation("not_serving", INF, "replica %s is %s at the end" % (r, st)))
        stats["orphans"] = len(orphans) if orphans is not None else None
        stats["health"] = run.final.get("health")
    # 7. What holders and waiters were told (reported), and LOST reasons
    # that cannot be right here: nothing in this workload releases by lease
    # id or deletes nodes, so LOST(DELETED) means a misreported loss (issue
    # 11: a session that expired while the replica was paused was reported
    # as DELETED).
    # A LOST(LEASE_EXPIRED) from the client's own KeepAlive ("KeepAlive: ...")
    # after the holder began its release: the release deleted the node and a
    # renewal in flight found it gone. The hold was released, not lost.
    release_began = {}
    for e in run.events:
        if e["ev"] == "release_start" and e.get("hold"):
            release_began.setdefault(e["hold"], e["t"])
    told, fails, stops = {}, {}, {}
    for e in run.events:
        if (e["ev"] == "change" and e.get("state") == "LOST"
                and e.get("reason") == "LEASE_EXPIRED"
                and str(e.get("message", "")).startswith("KeepAlive")
                and e.get("hold") in release_began and release_began[e["hold"]] <= e["t"]):
            v.append(Violation("spurious_lost", e["t"],
                               "hold %s (%s) told LOST(LEASE_EXPIRED) \"%s\" after it began "
                               "its own release" % (e.get("hold"), e.get("lock"),
                                                    e.get("message", "")), e.get("lock")))
        if e["ev"] == "change" and e.get("state") in ("SUSPENDED", "LOST"):
            k = "%s(%s)" % (e["state"], e.get("reason", "")) if e.get("reason") else e["state"]
            told[k] = told.get(k, 0) + 1
            if e["state"] == "LOST" and e.get("reason") == "DELETED":
                v.append(Violation("wrong_lost_reason", e["t"],
                                   "hold %s (%s) told LOST(DELETED) \"%s\", but no one released "
                                   "it by lease id or deleted its node" % (
                                       e.get("hold"), e.get("lock"), e.get("message", "")),
                                   e.get("lock")))
        elif e["ev"] == "acquire_fail":
            k = str(e.get("code"))
            fails[k] = fails.get(k, 0) + 1
        elif e["ev"] == "stop_using":
            k = "%s:%s" % (e.get("why"), e.get("state"))
            stops[k] = stops.get(k, 0) + 1
    stats["holders_told"] = dict(sorted(told.items()))
    stats["acquire_failures_by_code"] = dict(sorted(fails.items()))
    stats["stopped_using"] = dict(sorted(stops.items()))
    stats["unparsable_lines"] = len(run.bad_lines)
    return v, stats, holds


def merged_history(run):
    out = []
    for e in run.events:
        out.append((e["t"], "client", e))
    for e in run.nemesis:
        out.append((e["t"], "nemesis", e))
    for lock, entries in run.reglog.items():
        for e in entries:
            out.append((e["t"], "register/" + lock, e))
    out.sort(key=lambda x: x[0])
    return out


def print_context(run, viol, merged, before_s=4.0, after_s=1.0, limit=40, out=sys.stdout):
    t0 = run.meta.get("t0", 0)
    if viol.t == INF:
        return
    lo, hi = viol.t - before_s * NS, viol.t + after_s * NS

    def relevant(r):
        if viol.lock is None:
            return True
        if r[1].startswith("register/"):
            return r[1] == "register/" + viol.lock
        return r[1] == "nemesis" or r[2].get("lock") in (None, viol.lock)
    rows = [r for r in merged if lo <= r[0] <= hi and relevant(r)]
    # Keep the rows nearest the violation, and the nemesis' recent steps.
    if len(rows) > limit:
        rows.sort(key=lambda r: abs(r[0] - viol.t))
        rows = rows[:limit]
    nem = [r for r in merged if r[1] == "nemesis" and viol.t - 20 * NS <= r[0] < lo]
    rows = sorted(nem[-4:] + rows, key=lambda r: r[0])
    print("    --- history %.1f s before .. %.1f s after (times from run start) ---" % (
        before_s, after_s), file=out)
    for t, src, e in rows:
        fields = {k: x for k, x in e.items() if k not in ("t",)}
        mark = ">>" if abs(t - viol.t) < 1_000_000 else "  "
        print("    %s %s %-18s %s" % (mark, fmt_t(t, t0), src, json.dumps(fields, sort_keys=True)),
              file=out)


def active_faults(run, t, after_heal_s=5.0):
    """Faults injected before t and not healed more than after_heal_s before t."""
    inj, heal = {}, {}
    for e in run.nemesis:
        if e.get("ev") == "inject":
            inj[e["id"]] = e
        elif e.get("ev") == "heal":
            heal[e["id"]] = e["t"]
    out = []
    for fid, e in inj.items():
        if e["t"] <= t and heal.get(fid, INF) >= t - after_heal_s * NS:
            h = heal.get(fid)
            out.append("%s %s %s, injected %.2f s before%s" % (
                fid, e["fault"], json.dumps(e.get("detail", {}), sort_keys=True),
                (t - e["t"]) / NS,
                "" if h is None or h > t else ", healed %.2f s before" % ((t - h) / NS)))
    return out


def report(run, out=sys.stdout, context=True, max_context=8):
    viols, stats, _ = analyse(run)
    for x in viols:
        if x.t != INF:
            f = active_faults(run, x.t)
            x.text += " [faults: %s]" % ("; ".join(f) if f else "none active")
    by_kind = {}
    for x in viols:
        by_kind.setdefault(x.kind, []).append(x)
    print("checker: %s" % json.dumps(stats, sort_keys=True), file=out)
    kinds = ["overlap", "lost_update", "token_order", "late_notice", "validity_broken",
             "wrong_lost_reason", "spurious_lost", "heal_to_grant", "no_progress", "crash",
             "orphans",
             "not_serving"]
    print("checker: violations: " + ", ".join("%s=%d" % (k, len(by_kind.get(k, [])))
                                               for k in kinds), file=out)
    if viols:
        merged = merged_history(run)
        shown = set()
        for x in sorted(viols, key=lambda x: x.t):
            print("VIOLATION %s: %s" % (x.kind, x.text), file=out)
            # One excerpt per moment (an overlap and its late notice share one).
            key = (x.lock, x.t // (NS // 2))
            if context and len(shown) < max_context and key not in shown and x.t != INF:
                print_context(run, x, merged, out=out)
                shown.add(key)
    return viols, stats


# ---------------------------------------------------------------- self-test
def _synthetic(tmp, holds_spec, extra_reglog=None, extra_nemesis=()):
    """holds_spec: list of dicts(hold, client, lock, token, grant, ops=[(start,end,op,value)],
    changes=[(t,state,valid_ms)], release)."""
    os.makedirs(os.path.join(tmp, "history"))
    os.makedirs(os.path.join(tmp, "register"))
    ms = 1_000_000
    meta = {"t0": 0, "session_timeout_ms": 4000, "heal_slack_ms": 6000}
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f)
    hist, reg = {}, {}
    value = {}
    highest = {}
    for s in holds_spec:
        c, lock, tok, hid = s["client"], s["lock"], s["token"], s["hold"]
        L = hist.setdefault(c, [])
        base = {"client": c, "pid": 1, "hold": hid, "lock": lock}
        L.append(dict(base, t=s["grant"] * ms, ev="grant", token=tok, valid_ms=-1, replica="r1"))
        for (t, st, valid) in s.get("changes", []):
            L.append(dict(base, t=t * ms, ev="change", state=st, valid_ms=valid,
                          reason=s.get("changes_reason", ""),
                          message=s.get("changes_message", "")))
        last = None
        for (start, end, op, val) in s["ops"]:
            L.append(dict(base, t=start * ms, ev="op_start", op=op, token=tok, valid_ms=-1))
            L.append(dict(base, t=end * ms, ev="op_end", op=op, token=tok, accepted=True))
            prev = s.get("forced_prev", {}).get(start, value.get(lock, 0))
            new = prev if op == "read" else val
            reg.setdefault(lock, []).append({"t": (start + end) / 2 * ms, "op": op, "token": tok,
                                             "highest": highest.get(lock, 0), "prev": prev,
                                             "new": new, "accepted": True, "client": c,
                                             "hold": hid})
            value[lock] = new
            highest[lock] = tok
        L.append(dict(base, t=s["release"] * ms, ev="release_start"))
        L.append(dict(base, t=s["release"] * ms + 1, ev="release", code=0))
    for c, L in hist.items():
        with open(os.path.join(tmp, "history", c + ".jsonl"), "w") as f:
            for e in L:
                f.write(json.dumps(e) + "\n")
    for lock, L in reg.items():
        with open(os.path.join(tmp, "register", lock + ".reglog"), "w") as f:
            for e in L + (extra_reglog or []):
                f.write(json.dumps(e) + "\n")
    with open(os.path.join(tmp, "nemesis.jsonl"), "w") as f:
        f.write(json.dumps({"t": 38 * ms, "ev": "inject", "fault": "replica-kill", "id": "f1"}) + "\n")
        f.write(json.dumps({"t": 40 * ms, "ev": "heal", "fault": "replica-kill", "id": "f1"}) + "\n")
        for e in extra_nemesis:
            f.write(json.dumps(e) + "\n")
    with open(os.path.join(tmp, "final.json"), "w") as f:
        json.dump({"orphans": [], "health": {"r1": "SERVING", "r2": "SERVING", "r3": "SERVING"}}, f)


def self_test():
    # A clean history: two holds one after the other.
    def clean():
        return [
            dict(hold="a-h1", client="a", lock="L", token=10, grant=0,
                 ops=[(1, 2, "read", None), (30, 31, "write", 1), (40, 41, "write", 2)], release=45),
            dict(hold="b-h1", client="b", lock="L", token=20, grant=46,
                 ops=[(47, 48, "read", None), (70, 71, "write", 3)], release=80),
        ]
    cases = []
    cases.append(("clean", clean(), set()))
    # Overlap: b starts using before a's last op ends (b granted while a
    # still holds and a is never told).
    s = clean()
    s[0]["ops"][-1] = (40, 43, "write", 2)
    s[1]["grant"] = 41
    s[1]["ops"] = [(41.5, 42, "read", None), (44, 44.5, "write", 3)]
    s[1]["release"] = 50
    cases.append(("overlap", s, {"overlap", "late_notice"}))
    # Lost update: b reads 2, then its write lands over a value it never saw.
    s = clean()
    s[1]["forced_prev"] = {70: 7}
    cases.append(("lost update", s, {"lost_update"}))
    # Non-increasing token: b granted after a with a lower token.
    s = clean()
    s[1]["token"] = 10
    cases.append(("repeated token", s, {"token_order"}))
    s = clean()
    s[1]["token"] = 5
    cases.append(("decreasing token", s, {"token_order"}))
    # Late notice: a told SUSPENDED only after b was granted (a does no op
    # after that, so no overlap).
    s = clean()
    s[0]["release"] = 90
    s[0]["changes"] = [(60, "SUSPENDED", 500)]
    cases.append(("late notice + broken validity", s, {"late_notice", "validity_broken"}))
    # Told in time: SUSPENDED (valid 2 ms) before b's grant is fine.
    s = clean()
    s[0]["release"] = 90
    s[0]["changes"] = [(43, "SUSPENDED", 2)]
    cases.append(("told in time", s, set()))
    # Told LOST(DELETED) though no one deleted anything.
    s = clean()
    s[0]["changes"] = [(44, "LOST", 0)]
    s[0]["changes_reason"] = "DELETED"
    cases.append(("wrong LOST reason", s, {"wrong_lost_reason"}))
    # Its own KeepAlive told a releasing holder LOST(LEASE_EXPIRED).
    s = clean()
    s[0]["changes"] = [(s[0]["release"] + 0.5, "LOST", 0)]
    s[0]["changes_reason"] = "LEASE_EXPIRED"
    s[0]["changes_message"] = "KeepAlive: lease_id not found"
    cases.append(("LOST after its own release", s, {"spurious_lost"}))
    # A heal followed by no grant within the bound; a crashed process.
    s = clean()
    ms = 1_000_000
    s[1]["nemesis"] = [
        {"t": 100 * ms, "ev": "heal", "fault": "leader-kill", "id": "f0"},
        {"t": 60 * ms, "ev": "crash", "name": "r2", "pid": 7, "returncode": -6}]
    cases.append(("no grant after heal + crash", s, {"crash", "heal_to_grant"}))
    # Overlapping faults: a client kill healed while the ensemble is still
    # down owes no grant; the bound runs from the ensemble's heal (the last).
    def overlapping(grant_ms):
        s = clean()
        s.append(dict(hold="c-h1", client="c", lock="L", token=30, grant=grant_ms,
                      ops=[(grant_ms + 1, grant_ms + 2, "read", None),
                           (grant_ms + 10, grant_ms + 11, "write", 4)],
                      release=grant_ms + 20))
        s[2]["nemesis"] = [
            {"t": 90 * ms, "ev": "inject", "fault": "ensemble-down-long", "id": "f2"},
            {"t": 91 * ms, "ev": "inject", "fault": "client-kill", "id": "f3"},
            {"t": 300 * ms, "ev": "heal", "fault": "client-kill", "id": "f3"},
            {"t": 8000 * ms, "ev": "heal", "fault": "ensemble-down-long", "id": "f2"}]
        return s
    cases.append(("grant in time after the last heal", overlapping(15000), set()))
    cases.append(("grant late after the last heal", overlapping(19000), {"heal_to_grant"}))

    failures = 0
    for name, spec, want in cases:
        tmp = tempfile.mkdtemp(prefix="nemesis-selftest-")
        try:
            _synthetic(tmp, spec, extra_nemesis=[e for x in spec for e in x.get("nemesis", [])])
            viols, stats, _ = analyse(Run(tmp))
            got = {x.kind for x in viols}
            ok = got == want
            print("self-test %-32s want %-40s got %-40s %s" % (
                name, sorted(want), sorted(got), "ok" if ok else "FAIL"))
            if not ok:
                failures += 1
                for x in viols:
                    print("   ", x.kind, x.text)
        finally:
            shutil.rmtree(tmp)
    # The end probes' results are checked too.
    tmp = tempfile.mkdtemp(prefix="nemesis-selftest-")
    try:
        _synthetic(tmp, clean())
        with open(os.path.join(tmp, "final.json"), "w") as f:
            json.dump({"orphans": ["/turnstile/L/x-0123456789abcdef-0000000001"],
                       "health": {"r1": "SERVING", "r2": "NOT_SERVING"}}, f)
        got = {x.kind for x in analyse(Run(tmp))[0]}
        ok = got == {"orphans", "not_serving"}
        print("self-test %-32s %s (got %s)" % ("orphans + not serving", "ok" if ok else "FAIL",
                                                sorted(got)))
        failures += 0 if ok else 1
    finally:
        shutil.rmtree(tmp)
    print("%d passed, %d failed" % (len(cases) + 1 - failures, failures))
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    viols, _ = report(Run(argv[1]))
    return 1 if viols else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
