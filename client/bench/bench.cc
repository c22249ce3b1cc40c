// turnstile bench: flags, the four workloads, tables and BENCH_JSON lines.
#include "client/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <bitset>
#include <cctype>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/bench/bare_grpc.h"
#include "client/bench/bench_internal.h"
#include "client/bench/security.h"
#include "client/common/flags.h"

namespace turnstile::bench {
namespace {

constexpr char kUsage[] =
    "usage: turnstile bench [flags]\n"
    "\n"
    "Benchmarks a running turnstiled replica and, in the same run, the raw\n"
    "ZooKeeper floor it is built on; prints a table per workload and one\n"
    "line \"BENCH_JSON {...}\" per workload.\n"
    "\n"
    "  --server ADDR       turnstiled address (default 127.0.0.1:7400)\n"
    "  --zk CONNECT        ZooKeeper for the floor and `mntr` (default\n"
    "                      127.0.0.1:2181; mntr is read from the first server,\n"
    "                      which should be the one the replica uses)\n"
    "  --zk-root PATH      the replica's --zk-root (default /turnstile; W5\n"
    "                      lists its lock nodes there after the drain)\n"
    "  --zk-fsync on|off   whether that ZooKeeper fsyncs (forceSync); only a\n"
    "                      label for the tables and JSON (default unknown)\n"
    "  --server-pid PID    the replica's process id, for its CPU and context\n"
    "                      switches per cycle (w1..w3) and W5's memory and CPU\n"
    "                      (read from /proc; without it they are not measured)\n"
    "  --zk-pid PID        ZooKeeper's process id, for its CPU and context\n"
    "                      switches per cycle on each side (w1..w3)\n"
    "  --workloads LIST    of w1,w2,w3,w4,w5 (default all)\n"
    "  --duration D        per workload and side, e.g. 5s, 500ms (default 5s)\n"
    "  --warmup D          unmeasured cycles on both sides before the first of\n"
    "                      w1..w4 (default 3s; 0 for none): ZooKeeper's JIT and\n"
    "                      the replica warm up before anything is measured\n"
    "  --slices N          w1..w3 run each side's --duration as N slices,\n"
    "                      interleaved with the other side's in Thue-Morse\n"
    "                      order, A = turnstile, B = floor: ABBA, ABBABAAB, ...\n"
    "                      (default 4; 1..16, fewer if a slice would be under\n"
    "                      100 ms; 1 = turnstile, then floor)\n"
    "  --herd-sizes LIST   W4 queue lengths (default 10,100,1000,10000)\n"
    "  --w5-waiters N      W5 waiting streams (default 20000; 2..100000)\n"
    "  --w5-idle D         W5 window for the idle CPU reading (default 5s)\n"
    "  --w5-restart-zk CMD a shell command (sh -c) that restarts the replica's\n"
    "                      ZooKeeper on the same address and data dir and returns\n"
    "                      once it serves; W5 runs it while all waiters wait and\n"
    "                      checks the replica's reconnection (default: none)\n"
    "  --bare-server PATH  turnstile-bare-server, for W5's gRPC baseline (default:\n"
    "                      the one next to this program, if any; \"\" = none)\n"
    "  --quick             1s per workload, a 500ms warm-up, herd sizes 10,50,\n"
    "                      W5 with 2000 waiters and a 1s idle window (for tests)\n"
    "  --secure-server LABEL=ADDRESS,ca=FILE[,cert=FILE,key=FILE][,server-name=NAME]\n"
    "                  [,pid=PID][,rules=N]\n"
    "                      another replica (same ZooKeeper, same flags but its\n"
    "                      security) over which w1..w3 also run, after their\n"
    "                      floor tables: repeatable (up to 6). ca: the CAs of its\n"
    "                      server certificate (TLS); cert, key: the bench's client\n"
    "                      certificate (mutual TLS); server-name: the name that\n"
    "                      certificate carries if not the address's host; pid: for\n"
    "                      its CPU per cycle; rules: its --authz-file has N rules\n"
    "                      (a label), which must grant the bench's identity\n"
    "                      acquire on names starting \"bench-\" and not on\n"
    "                      \"probe-denied-...\". Each side is checked first\n"
    "                      (granted with its credentials; plaintext refused; with\n"
    "                      cert, TLS without a certificate refused; with rules,\n"
    "                      \"probe-denied-...\" PERMISSION_DENIED). Then each of\n"
    "                      w1..w3 also runs on --server (plaintext) and on every\n"
    "                      secure side, one slice each per round (--slices rounds,\n"
    "                      every other one reversed: ABCDDCBA...), and prints each\n"
    "                      side's ratio to plaintext and the largest policy's over\n"
    "                      the smallest's, plus one line BENCH_JSON\n"
    "                      {\"workload\":\"wN-security\",...}. Channels are opened\n"
    "                      before the first slice: per-call cost, not handshakes.\n"
    "                      deploy/local/bench.sh --security starts such replicas\n"
    "\n"
    "  w1  uncontended: 1 client, 1 lock, acquire+release cycles\n"
    "  w2  contended: 16 clients, 1 lock, hold 0; handoff = RELEASED at the\n"
    "      holder -> ACQUIRED at the next holder\n"
    "  w3  many locks: 32 clients, each on its own lock\n"
    "  w4  herd: N waiters behind one holder, drained; latency, rate, and\n"
    "      ZooKeeper packets and watch notifications per handoff. One drain per\n"
    "      N and side (a drain is one measurement, not cut into slices); the\n"
    "      side that goes first alternates with N: turnstile at the 1st, 3rd,\n"
    "      ... herd size, the floor at the 2nd, 4th, ...\n"
    "  w5  scale: N streams waiting on one replica over 64 channels, half on\n"
    "      one lock, half over 100 locks, plus 10 reference locks with 10\n"
    "      waiters; every lock first taken by one holder. Reports the\n"
    "      replica's RSS and idle CPU while all wait, ZooKeeper's watch count,\n"
    "      then drains everything and compares the big lock's handoffs with\n"
    "      the reference locks'. Checks (always): one node per contender while\n"
    "      all wait, each contender granted once, in fencing-token order per\n"
    "      lock, no grant before the previous holder's release, no node left\n"
    "      under the lock nodes after the drain. With --w5-restart-zk, ZooKeeper\n"
    "      is restarted while all wait (after the idle reading), and checked:\n"
    "      ZooKeeper's uptime shows it restarted; the same ZooKeeper sessions\n"
    "      own the contender nodes after it (none expired: `dump`);\n"
    "      zk_watch_count returns to its value before within 60 s of ZooKeeper\n"
    "      serving again (the time is reported); every holder SUSPENDED is\n"
    "      RESUMED, none LOST; no waiter is told anything but QUEUED. Then the\n"
    "      drain and its checks as above. First, W5 starts --bare-server (gRPC\n"
    "      with the same proto, no engine, no ZooKeeper), opens the same number\n"
    "      of idle Acquire streams to it the same way, reads its RSS after the\n"
    "      same idle window, stops it, and reports the replica's RSS over it\n"
    "      (target <= 1.15).\n"
    "\n"
    "W4 needs N+1 contenders on one lock and W5 N/2+1: run turnstiled with\n"
    "--max-contenders-per-lock above both (e.g. 20001), --max-streams above\n"
    "W5's streams (N + 211) and a watch budget for every contender of W5 (about\n"
    "70 bytes each; --max-watch-bytes is per ZooKeeper session, one lock's\n"
    "contenders share one session: --zk-sessions 4 --max-watch-bytes 921600 for\n"
    "the defaults). A ZooKeeper restart needs a session timeout that outlasts\n"
    "it (e.g. --zk-session-timeout 30s). deploy/local/bench.sh does all of this.\n"
    "\n"
    "Exit codes: 0 every workload ran and passed its checks; 1 a workload\n"
    "failed to run, or a --secure-server is not what it says; 2 usage; 3 a W5\n"
    "correctness check (the restart's included) failed.\n";

// A comma-separated list of integers in lo..hi.
bool ParseIntList(const std::string& text, std::vector<int>* out, long lo, long hi) {
  out->clear();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    if (item.empty()) return false;
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < lo || v > hi) return false;
    out->push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return !out->empty();
}

bool ParseWorkloads(const std::string& text, std::vector<std::string>* out) {
  out->clear();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    for (char& ch : item) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (item != "w1" && item != "w2" && item != "w3" && item != "w4" && item != "w5") {
      return false;
    }
    bool dup = false;
    for (const auto& w : *out) dup |= (w == item);
    if (!dup) out->push_back(item);
    pos = comma + 1;
  }
  return !out->empty();
}

// `name` in this program's own directory (as built, and as installed), or
// "" if there is no such executable.
std::string SiblingProgram(const std::string& name) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + name;
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

// 0 = ok, 2 = usage error, -1 = --help.
int ParseFlags(int argc, char** argv, BenchOptions* o) {
  bool duration_set = false, herd_set = false, w5_waiters_set = false, w5_idle_set = false;
  bool warmup_set = false, bare_server_set = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return -1;
    if (arg == "--quick") {
      o->quick = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "turnstile bench: unexpected argument \"%s\"\n%s", arg.c_str(), kUsage);
      return 2;
    }
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) name = name.substr(0, eq);
    static const char* const kValued[] = {"server",     "zk",         "zk-root",
                                          "zk-fsync",   "server-pid", "zk-pid",     "workloads",
                                          "duration",   "herd-sizes", "w5-waiters",
                                          "w5-idle",    "warmup",     "slices",
                                          "w5-restart-zk", "bare-server",
                                          "secure-server"};
    if (std::find(std::begin(kValued), std::end(kValued), name) == std::end(kValued)) {
      std::fprintf(stderr, "turnstile bench: unknown flag --%s\n%s", name.c_str(), kUsage);
      return 2;
    }
    if (eq != std::string::npos) {
      value = arg.substr(2 + eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "turnstile bench: --%s needs a value\n", name.c_str());
      return 2;
    }
    // Refuses `value` for this flag: the usage error.
    auto refuse = [&](const char* why) {
      std::fprintf(stderr, "turnstile bench: --%s: \"%s\" %s\n", name.c_str(), value.c_str(),
                   why);
      return 2;
    };
    auto duration_in = [&](Millis lo, Millis hi, Millis* out) {
      auto d = ParseDuration(value);
      if (!d.ok() || *d < lo || *d > hi) return false;
      *out = *d;
      return true;
    };
    auto one_int = [&](long lo, long hi, int* out) {
      std::vector<int> v;
      if (!ParseIntList(value, &v, lo, hi) || v.size() != 1) return false;
      *out = v[0];
      return true;
    };
    if (name == "server") {
      o->server = value;
    } else if (name == "zk") {
      o->zk = value;
    } else if (name == "zk-root") {
      if (value.empty() || value[0] != '/' || value == "/" || value.back() == '/') {
        return refuse("must be an absolute znode path");
      }
      o->zk_root = value;
    } else if (name == "zk-fsync") {
      if (value != "on" && value != "off") return refuse("must be on or off");
      o->zk_fsync = value;
    } else if (name == "server-pid") {
      if (!one_int(1, 1 << 30, &o->server_pid)) return refuse("is not a process id");
    } else if (name == "zk-pid") {
      if (!one_int(1, 1 << 30, &o->zk_pid)) return refuse("is not a process id");
    } else if (name == "w5-waiters") {
      if (!one_int(2, 100000, &o->w5_waiters)) return refuse("must be 2..100000");
      w5_waiters_set = true;
    } else if (name == "w5-idle") {
      if (!duration_in(Millis(100), Millis(600 * 1000), &o->w5_idle)) {
        return refuse("must be 100ms..10m");
      }
      w5_idle_set = true;
    } else if (name == "w5-restart-zk") {
      if (value.empty()) return refuse("must be a shell command");
      o->w5_restart_zk = value;
    } else if (name == "secure-server") {
      SecureServer server;
      std::string why;
      if (!ParseSecureServer(value, &server, &why)) return refuse(why.c_str());
      for (const SecureServer& other : o->secure) {
        if (other.label == server.label) return refuse("repeats a label");
      }
      if (o->secure.size() >= 6) return refuse("is one too many (at most 6)");
      o->secure.push_back(server);
    } else if (name == "bare-server") {
      o->bare_server = value;  // "" = no baseline
      bare_server_set = true;
    } else if (name == "workloads") {
      if (!ParseWorkloads(value, &o->workloads)) return refuse("is not a list of w1,w2,w3,w4,w5");
    } else if (name == "duration") {
      if (!duration_in(Millis(100), Millis(3600 * 1000), &o->duration)) {
        return refuse("must be 100ms..1h");
      }
      duration_set = true;
    } else if (name == "warmup") {
      if (!duration_in(Millis(0), Millis(600 * 1000), &o->warmup)) {
        return refuse("must be 0..10m");
      }
      warmup_set = true;
    } else if (name == "slices") {
      if (!one_int(1, 16, &o->slices)) return refuse("must be 1..16");
    } else if (name == "herd-sizes") {
      if (!ParseIntList(value, &o->herd_sizes, 1, 100000)) {
        return refuse("must be a list of 1..100000");
      }
      herd_set = true;
    } else {
      std::fprintf(stderr, "turnstile bench: unknown flag --%s\n%s", name.c_str(), kUsage);
      return 2;
    }
  }
  if (o->server.empty() || o->zk.empty()) {
    std::fprintf(stderr, "turnstile bench: --server and --zk must not be empty\n");
    return 2;
  }
  if (!bare_server_set) o->bare_server = SiblingProgram("turnstile-bare-server");
  o->zk_floor = SiblingProgram("turnstile-zk-floor");
  if (o->quick) {
    if (!duration_set) o->duration = Millis(1000);
    if (!warmup_set) o->warmup = Millis(500);
    if (!herd_set) o->herd_sizes = {10, 50};
    if (!w5_waiters_set) o->w5_waiters = 2000;
    if (!w5_idle_set) o->w5_idle = Millis(1000);
  }
  // Slices of at least 100 ms: a shorter one would be mostly its start and
  // its end (streams opened, the last cycles finishing after the window).
  o->slices = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(o->slices, o->duration / Millis(100))));
  return 0;
}

// --- printing -------------------------------------------------------------------

double Ratio(double t, double f) { return f > 0 ? t / f : NAN; }

std::string Fmt(double v, const char* fmt = "%.3f") {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

struct Row {
  std::string metric;
  double turnstile;
  double floor;
};

void PrintTable(const std::vector<Row>& rows) {
  std::printf("  %-40s %14s %14s %16s\n", "metric", "turnstile", "floor", "turnstile/floor");
  for (const Row& r : rows) {
    std::printf("  %-40s %14s %14s %16s\n", r.metric.c_str(), Fmt(r.turnstile).c_str(),
                Fmt(r.floor).c_str(), Fmt(Ratio(r.turnstile, r.floor), "%.2f").c_str());
  }
}

void PrintJson(const Json& j) {
  std::printf("BENCH_JSON %s\n", j.Text().c_str());
  std::fflush(stdout);
}

// Explains the clamped RELEASED -> ACQUIRED numbers.
void PrintHandoffNote(size_t handoffs, uint64_t before, const Latency& signed_ms) {
  std::printf("  %zu handoffs; in %llu the next holder's ACQUIRED arrived before the previous "
              "holder's RELEASED\n  (counted as 0 ms above; unclamped p50 %s ms, min %s ms)\n",
              handoffs, static_cast<unsigned long long>(before), Fmt(signed_ms.p50_ms).c_str(),
              Fmt(signed_ms.min_ms).c_str());
}

std::string JoinErrors(const std::vector<std::string>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (e.empty()) continue;
    if (!out.empty()) out += "; ";
    out += e;
  }
  return out;
}

Json Finish(Json j, const std::vector<std::string>& errors, bool* ok) {
  std::string error = JoinErrors(errors);
  j.Num("ok", error.empty() ? 1 : 0);
  if (error.empty()) {
    j.Null("error");
  } else {
    j.Str("error", error);
    *ok = false;
    std::printf("  ERROR: %s\n", error.c_str());
  }
  return j;
}

// --- workloads --------------------------------------------------------------------

// Whether ZooKeeper fsynced changes every write's latency: each table
// heading and JSON line says which was used.
const char* Fsync(const BenchOptions& o) { return o.zk_fsync.c_str(); }

Json JsonFor(const BenchOptions& o, const std::string& workload) {
  return Json().Str("workload", workload).Str("zk_fsync", o.zk_fsync);
}

std::string LockName(const BenchOptions& o, const std::string& suffix) {
  return "bench-" + o.run_tag + "-" + suffix;
}

std::string ErrorOf(const CycleResult& r, const char* side) {
  return r.errors == 0 ? "" : std::string(side) + ": " + r.error;
}

// --- fair comparison: warm-up and interleaved slices ---------------------------------
//
// Measuring one side after the other favours the second: ZooKeeper (a JVM)
// is still compiling its hot paths during the first seconds of load, and
// the replica is cold too. So before the first measured workload both sides
// run unmeasured cycles (--warmup), and W1..W3 split each side's --duration
// into --slices slices run in Thue-Morse order: slot i belongs to the
// turnstile side (A) when i has an even number of one bits, i.e. AB, ABBA,
// ABBABAAB, ... Whatever drifts during a workload and weighs on both sides
// alike (the JIT, caches filling, other load on the machine) then falls on
// both equally: a linear drift cancels with 2 slices per side, a quadratic
// one with 4. A side's result is its slices merged: cycles summed, rates
// over the summed measured windows, latency samples pooled; W2's handoffs
// are paired within a slice only (TurnstileCycles::Run). W4 drains are not
// sliced (one drain is one measurement, and running each twice would
// double the longest workload): the side that goes first alternates with
// the herd size instead (RunW4).

// Whether slot `slot` of the interleaved order is the turnstile side's.
bool TurnstileSlot(int slot) {
  return std::bitset<32>(static_cast<uint32_t>(slot)).count() % 2 == 0;
}

// "ABBABAAB" for 4 slices per side.
std::string SliceOrder(int slices) {
  std::string order;
  for (int slot = 0; slot < 2 * slices; ++slot) order += TurnstileSlot(slot) ? 'A' : 'B';
  return order;
}

// Runs `slices` slices of each side in SliceOrder; each callback measures
// one slice (its argument: how many of its side ran before it) and returns
// false on an error, after which its side runs no more slices (they would
// fail too, and a failed contended floor slice may leave nodes that would
// stall the next).
void Interleave(int slices, const std::function<bool(int)>& turnstile,
                const std::function<bool(int)>& floor) {
  bool turnstile_ok = true, floor_ok = true;
  int turnstile_done = 0, floor_done = 0;
  for (int slot = 0; slot < 2 * slices; ++slot) {
    if (TurnstileSlot(slot)) {
      if (turnstile_ok) turnstile_ok = turnstile(turnstile_done++);
    } else {
      if (floor_ok) floor_ok = floor(floor_done++);
    }
  }
}

// CPU and context switches per cycle of each process, both sides: what a
// cycle costs the machine (on one machine that is the throughput).
void PrintUsage(const SideUsage& t, uint64_t t_cycles, const SideUsage& f, uint64_t f_cycles) {
  auto per = [](const SideUsage::Process& p, uint64_t cycles, bool cpu) {
    if (!p.known || cycles == 0) return std::nan("");
    return cpu ? p.cpu_s * 1000.0 / cycles : static_cast<double>(p.switches) / cycles;
  };
  std::printf("  per cycle (from /proc, per slice)           CPU (ms)  ctx switches   CPU / floor's process\n");
  const double floor_cpu = per(f.self, f_cycles, true);
  auto line = [&](const char* what, const SideUsage::Process& p, uint64_t cycles) {
    const double cpu = per(p, cycles, true);
    std::printf("  %-42s %9s %13s %23s\n", what, Fmt(cpu, "%.3f").c_str(),
                Fmt(per(p, cycles, false), "%.1f").c_str(), Fmt(Ratio(cpu, floor_cpu), "%.2f").c_str());
  };
  line("turnstile: turnstiled", t.server, t_cycles);
  line("turnstile: client side (this bench)", t.self, t_cycles);
  line("turnstile: ZooKeeper", t.zk, t_cycles);
  line("floor: its process (turnstile-zk-floor)", f.self, f_cycles);
  line("floor: ZooKeeper", f.zk, f_cycles);
  const double t_zk = per(t.zk, t_cycles, true), f_zk = per(f.zk, f_cycles, true);
  std::printf("  ZooKeeper CPU per turnstile cycle / per floor cycle: %s\n",
              Fmt(Ratio(t_zk, f_zk), "%.2f").c_str());
}

// W1 and W3: what gRPC alone costs per cycle (turnstile-bare-server
// --grant, the same client code), and what turnstile costs above it, each
// over the floor's process: the part of turnstile's cost no engine change
// can remove.
void PrintGrpcAlone(const CycleResult& b, const SideUsage& bu, const SideUsage& t,
                    uint64_t t_cycles, const SideUsage& f, uint64_t f_cycles) {
  auto per = [](const SideUsage::Process& p, uint64_t cycles, bool cpu) {
    if (!p.known || cycles == 0) return std::nan("");
    return cpu ? p.cpu_s * 1000.0 / cycles : static_cast<double>(p.switches) / cycles;
  };
  std::printf("  gRPC alone (turnstile-bare-server --grant: ACQUIRED at once, RELEASED on release, "
              "no lock;\n   same client code; one slice after each turnstile slice): %s cycles/s\n",
              Fmt(b.per_second, "%.1f").c_str());
  const double floor_cpu = per(f.self, f_cycles, true);
  auto line = [&](const char* what, double cpu, double switches) {
    std::printf("  %-42s %9s %13s %23s\n", what, Fmt(cpu, "%.3f").c_str(),
                Fmt(switches, "%.1f").c_str(), Fmt(Ratio(cpu, floor_cpu), "%.2f").c_str());
  };
  const double bs = per(bu.server, b.cycles, true), bc = per(bu.self, b.cycles, true);
  line("gRPC alone: server", bs, per(bu.server, b.cycles, false));
  line("gRPC alone: client side (this bench)", bc, per(bu.self, b.cycles, false));
  line("turnstiled above gRPC alone's server", per(t.server, t_cycles, true) - bs,
       per(t.server, t_cycles, false) - per(bu.server, b.cycles, false));
  line("client side above gRPC alone's client", per(t.self, t_cycles, true) - bc,
       per(t.self, t_cycles, false) - per(bu.self, b.cycles, false));
}

// The same, for BENCH_JSON.
Json UsageJson(const SideUsage& u, uint64_t cycles, bool server) {
  Json j;
  auto add = [&](const char* name, const SideUsage::Process& p) {
    if (!p.known || cycles == 0) return;
    j.Num(std::string(name) + "_cpu_ms_per_cycle", p.cpu_s * 1000.0 / cycles)
        .Num(std::string(name) + "_switches_per_cycle", static_cast<double>(p.switches) / cycles);
  };
  if (server) add("turnstiled", u.server);
  add(server ? "client" : "process", u.self);
  add("zookeeper", u.zk);
  return j;
}

// The length of one slice of W1..W3.
Millis SliceLength(const BenchOptions& o) { return o.duration / o.slices; }

// The heading line that says how the sides were ordered.
void PrintOrderNote(const BenchOptions& o) {
  char warm[64];
  if (o.warmup.count() > 0) {
    std::snprintf(warm, sizeof(warm), "after a %.1f s warm-up", o.warmup.count() / 1000.0);
  } else {
    std::snprintf(warm, sizeof(warm), "no warm-up (--warmup 0)");
  }
  if (o.slices > 1) {
    std::printf("   sides interleaved %s (A turnstile, B floor) in %d slices of %.2f s per side, "
                "%s\n",
                SliceOrder(o.slices).c_str(), o.slices, SliceLength(o).count() / 1000.0, warm);
  } else {
    std::printf("   sides not interleaved (--slices 1): turnstile, then floor, %s\n", warm);
  }
}

// Each slice's rate, in the order run: how much the sides drifted or
// wavered (other load on the machine) while they were measured.
void PrintSliceRates(const CycleSamples& t, const CycleSamples& f) {
  if (t.slice_rates.size() < 2 && f.slice_rates.size() < 2) return;
  auto list = [](const CycleSamples& r) {
    std::string out;
    for (double v : r.slice_rates) out += " " + Fmt(v, "%.0f");
    return out.empty() ? std::string(" -") : out;
  };
  std::printf("  cycles/s per slice, in order: turnstile%s; floor%s\n", list(t).c_str(),
              list(f).c_str());
}

// A side that could not even start: one error, no samples.
CycleSamples Failed(const std::string& error) {
  CycleSamples r;
  r.errors = 1;
  r.error = error;
  return r;
}

// Before the first measured workload: o.warmup of unmeasured cycles, the
// sides in ABBA order (a quarter each). The turnstile side runs one client
// on a lock of its own and three on one shared lock (grants, queueing and
// handoffs: the paths W2..W4 take too); the floor the same shapes on one
// session (W1's create+getChildren+delete loop, then W2's contended
// recipe). Errors are printed, not counted: the workloads report their own.
void RunWarmup(const BenchOptions& o) {
  const Millis quarter = o.warmup / 4;
  const Clock::time_point start = Clock::now();
  CycleSamples t, f;
  TurnstileCycles turnstile(o, {LockName(o, "warmup-solo"), LockName(o, "warmup-shared"),
                                LockName(o, "warmup-shared"), LockName(o, "warmup-shared")});
  std::string error;
  if (!turnstile.Connect(&error)) t = Failed(error);
  std::unique_ptr<Floor> floor = Floor::Open(o, &error);
  if (floor == nullptr) f = Failed(error);
  Interleave(
      2,
      [&](int) {
        if (t.errors == 0) t.Merge(turnstile.Run(quarter));
        return t.errors == 0;
      },
      [&](int) {
        if (f.errors == 0) f.Merge(floor->Cycles("warmup", 1, quarter / 2));
        if (f.errors == 0) f.Merge(floor->ContendedLock("warmup-lock", 3, quarter / 2));
        return f.errors == 0;
      });
  floor.reset();
  std::printf("warm-up: %.1f s unmeasured (took %.1f s), ABBA: turnstile 1 client + 3 on one "
              "lock, %llu cycles; floor the same on one ZooKeeper session, %llu cycles\n",
              o.warmup.count() / 1000.0,
              std::chrono::duration<double>(Clock::now() - start).count(),
              static_cast<unsigned long long>(t.cycles), static_cast<unsigned long long>(f.cycles));
  if (t.errors > 0) std::printf("  warm-up, turnstile: %s\n", t.error.c_str());
  if (f.errors > 0) std::printf("  warm-up, floor: %s\n", f.error.c_str());
  std::fflush(stdout);
}

// W1 and W3: `clients` clients, each on its own lock.
bool RunSeparateLocks(const BenchOptions& o, const std::string& w, int clients) {
  const double secs = o.duration.count() / 1000.0;
  std::printf("\n== %s %s: %d client%s, %d lock%s, acquire+release cycles, hold 0, %.1f s per "
              "side; ZooKeeper fsync %s\n",
              w == "w1" ? "W1" : "W3", w == "w1" ? "uncontended" : "many locks", clients,
              clients == 1 ? "" : "s", clients, clients == 1 ? "" : "s", secs, Fsync(o));
  std::printf("   floor: create(ephemeral-sequential)+getChildren+delete cycles, %d loop%s on one "
              "ZooKeeper session\n",
              clients, clients == 1 ? "" : "s");
  PrintOrderNote(o);
  std::fflush(stdout);
  std::vector<std::string> names;
  for (int i = 0; i < clients; ++i) {
    names.push_back(LockName(o, clients == 1 ? w : w + "-" + std::to_string(i)));
  }
  CycleSamples ts, fs;
  TurnstileCycles turnstile(o, names);
  std::string error;
  if (!turnstile.Connect(&error)) ts = Failed(error);
  std::unique_ptr<Floor> floor = Floor::Open(o, &error);
  if (floor == nullptr) fs = Failed(error);
  const Millis slice = SliceLength(o);
  UsageMeter meter(o);
  SideUsage tu, fu, bu;
  // gRPC alone, right after each turnstile slice (same client code, no lock).
  CycleSamples bs;
  std::unique_ptr<BareCycles> bare;
  if (!o.bare_server.empty()) {
    bare = std::make_unique<BareCycles>();
    if (!bare->Start(o, names, &error)) bs = Failed(error);
  }
  Interleave(
      o.slices,
      [&](int) {
        if (ts.errors == 0) {
          ts.Merge(meter.Measure(&tu, true, [&] { return turnstile.Run(slice); }));
        }
        if (bare != nullptr && bs.errors == 0) bs.Merge(bare->Run(slice, &bu));
        return ts.errors == 0;
      },
      [&](int) {
        if (fs.errors == 0) {
          fs.Merge(meter.Measure(
              &fu, false, [&] { return floor->Cycles(w, clients, slice); }, floor->pid()));
        }
        return fs.errors == 0;
      });
  floor.reset();  // deletes the floor's nodes before the next workload
  bare.reset();
  const CycleResult t = ts.Result();
  const CycleResult f = fs.Result();
  const CycleResult b = bs.Result();
  const char* rate = w == "w1" ? "ops_per_s" : "cycles_per_s";
  PrintTable({{w == "w1" ? "ops/s (acquire+release cycles)" : "cycles/s", t.per_second, f.per_second},
              {"cycle p50 (ms)", t.cycle.p50_ms, f.cycle.p50_ms},
              {"cycle p99 (ms)", t.cycle.p99_ms, f.cycle.p99_ms}});
  std::printf("  cycles: turnstile %llu, floor %llu\n",
              static_cast<unsigned long long>(t.cycles), static_cast<unsigned long long>(f.cycles));
  PrintSliceRates(ts, fs);
  PrintUsage(tu, t.cycles, fu, f.cycles);
  if (!o.bare_server.empty()) PrintGrpcAlone(b, bu, tu, t.cycles, fu, f.cycles);
  auto side = [&](const CycleResult& r) {
    return Json()
        .Int("cycles", static_cast<int64_t>(r.cycles))
        .Num(rate, r.per_second)
        .Num("cycle_p50_ms", r.cycle.p50_ms)
        .Num("cycle_p99_ms", r.cycle.p99_ms)
        .Num("cycle_mean_ms", r.cycle.mean_ms)
        .Int("errors", static_cast<int64_t>(r.errors));
  };
  bool ok = true;
  Json j = JsonFor(o, w);
  j.Int("clients", clients)
      .Int("locks", clients)
      .Num("duration_s", secs)
      .Int("slices_per_side", o.slices)
      .Num("warmup_s", o.warmup.count() / 1000.0)
      .Obj("turnstile", side(t))
      .Obj("floor", side(f).Str("op", "create_es+getChildren+delete"))
      .Obj("usage", Json()
                        .Obj("turnstile", UsageJson(tu, t.cycles, true))
                        .Obj("floor", UsageJson(fu, f.cycles, false)))
      .Obj("ratio", Json()
                        .Num(rate, Ratio(t.per_second, f.per_second))
                        .Num("cycle_p50_ms", Ratio(t.cycle.p50_ms, f.cycle.p50_ms))
                        .Num("cycle_p99_ms", Ratio(t.cycle.p99_ms, f.cycle.p99_ms)));
  std::string bare_error;
  if (!o.bare_server.empty()) {
    Json usage;
    if (b.cycles > 0 && bu.server.known && bu.self.known) {
      usage.Num("server_cpu_ms_per_cycle", bu.server.cpu_s * 1000.0 / b.cycles)
          .Num("server_switches_per_cycle", static_cast<double>(bu.server.switches) / b.cycles)
          .Num("client_cpu_ms_per_cycle", bu.self.cpu_s * 1000.0 / b.cycles)
          .Num("client_switches_per_cycle", static_cast<double>(bu.self.switches) / b.cycles);
    }
    j.Obj("grpc_alone", side(b).Obj("usage", usage));
    // gRPC alone is a baseline, not a side: its failure is reported, and fails the run.
    bare_error = ErrorOf(b, "grpc_alone");
  }
  PrintJson(Finish(j, {ErrorOf(t, "turnstile"), ErrorOf(f, "floor"), bare_error}, &ok));
  return ok;
}

bool RunW2(const BenchOptions& o) {
  const double secs = o.duration.count() / 1000.0;
  const int clients = o.w2_clients;
  std::printf("\n== W2 contended: %d clients, 1 lock, hold 0, %.1f s per side; ZooKeeper fsync %s\n",
              clients, secs, Fsync(o));
  std::printf("   handoff = previous holder's RELEASED -> next holder's ACQUIRED (one clock, one "
              "process)\n");
  std::printf("   floor: cycles/s = %d clients of the same herd-free recipe on one ZooKeeper "
              "session;\n          handoff = delete issued -> getData watch fired in another "
              "session\n",
              clients);
  PrintOrderNote(o);
  if (o.slices > 1) {
    std::printf("   (each floor slot runs both floor measurements, one slice each, their order "
                "flipped every slot;\n    handoffs are paired within a slice)\n");
  }
  std::fflush(stdout);
  std::vector<std::string> names(clients, LockName(o, "w2"));
  CycleSamples ts, fs, hs;
  UsageMeter meter(o);
  SideUsage tu, fu;
  TurnstileCycles turnstile(o, names);
  std::string error;
  if (!turnstile.Connect(&error)) ts = Failed(error);
  std::unique_ptr<Floor> floor = Floor::Open(o, &error);
  if (floor == nullptr) {
    fs = Failed(error);
    hs = Failed(error);
  }
  const Millis slice = SliceLength(o);
  Interleave(
      o.slices,
      [&](int) {
        if (ts.errors == 0) {
          ts.Merge(meter.Measure(&tu, true, [&] { return turnstile.Run(slice); }));
        }
        return ts.errors == 0;
      },
      [&](int k) {
        // Contended cycles, then delete -> watch; the other way round in
        // every other slot, so neither sits nearer the start on average.
        auto cycles = [&] {
          if (fs.errors == 0) {
            fs.Merge(meter.Measure(
                &fu, false, [&] { return floor->ContendedLock("w2", clients, slice); },
                floor->pid()));
          }
        };
        auto handoffs = [&] {
          if (hs.errors == 0) hs.Merge(floor->DeleteToWatch("w2-handoff", slice));
        };
        if (k % 2 == 0) {
          cycles();
          handoffs();
        } else {
          handoffs();
          cycles();
        }
        return fs.errors == 0 && hs.errors == 0;
      });
  floor.reset();
  const CycleResult t = ts.Result();
  const CycleResult f = fs.Result();
  const CycleResult h = hs.Result();
  PrintTable({{"cycles/s", t.per_second, f.per_second},
              {"handoff p50 (ms)", t.handoff.p50_ms, h.handoff.p50_ms},
              {"handoff p99 (ms)", t.handoff.p99_ms, h.handoff.p99_ms},
              {"release sent -> next ACQUIRED p50 (ms)", t.release_to_acquired.p50_ms,
               h.handoff.p50_ms},
              {"release sent -> next ACQUIRED p99 (ms)", t.release_to_acquired.p99_ms,
               h.handoff.p99_ms}});
  PrintHandoffNote(t.handoff.count, t.acquired_before_released, t.handoff_signed);
  std::printf("  floor: %zu delete->watch samples\n", h.handoff.count);
  PrintSliceRates(ts, fs);
  PrintUsage(tu, t.cycles, fu, f.cycles);
  bool ok = true;
  Json j = JsonFor(o, "w2");
  j.Int("clients", clients)
      .Int("locks", 1)
      .Num("duration_s", secs)
      .Int("slices_per_side", o.slices)
      .Num("warmup_s", o.warmup.count() / 1000.0)
      .Obj("turnstile", Json()
                            .Int("cycles", static_cast<int64_t>(t.cycles))
                            .Num("cycles_per_s", t.per_second)
                            .Num("cycle_p50_ms", t.cycle.p50_ms)
                            .Num("cycle_p99_ms", t.cycle.p99_ms)
                            .Int("handoffs", static_cast<int64_t>(t.handoff.count))
                            .Num("handoff_p50_ms", t.handoff.p50_ms)
                            .Num("handoff_p99_ms", t.handoff.p99_ms)
                            .Num("handoff_mean_ms", t.handoff.mean_ms)
                            .Num("handoff_signed_p50_ms", t.handoff_signed.p50_ms)
                            .Num("handoff_signed_min_ms", t.handoff_signed.min_ms)
                            .Int("acquired_before_released",
                                 static_cast<int64_t>(t.acquired_before_released))
                            .Num("release_to_acquired_p50_ms", t.release_to_acquired.p50_ms)
                            .Num("release_to_acquired_p99_ms", t.release_to_acquired.p99_ms)
                            .Obj("usage", UsageJson(tu, t.cycles, true))
                            .Int("errors", static_cast<int64_t>(t.errors)))
      .Obj("floor", Json()
                        .Int("cycles", static_cast<int64_t>(f.cycles))
                        .Num("cycles_per_s", f.per_second)
                        .Int("handoffs", static_cast<int64_t>(h.handoff.count))
                        .Num("handoff_p50_ms", h.handoff.p50_ms)
                        .Num("handoff_p99_ms", h.handoff.p99_ms)
                        .Num("handoff_mean_ms", h.handoff.mean_ms)
                        .Str("cycles_op", "raw herd-free lock recipe, one session")
                        .Obj("usage", UsageJson(fu, f.cycles, false))
                        .Str("handoff_op", "delete issued -> getData watch fired (2 sessions)")
                        .Int("errors", static_cast<int64_t>(f.errors + h.errors)))
      .Obj("ratio", Json()
                        .Num("cycles_per_s", Ratio(t.per_second, f.per_second))
                        .Num("handoff_p50_ms", Ratio(t.handoff.p50_ms, h.handoff.p50_ms))
                        .Num("handoff_p99_ms", Ratio(t.handoff.p99_ms, h.handoff.p99_ms))
                        .Num("release_to_acquired_p50_ms",
                             Ratio(t.release_to_acquired.p50_ms, h.handoff.p50_ms))
                        .Num("release_to_acquired_p99_ms",
                             Ratio(t.release_to_acquired.p99_ms, h.handoff.p99_ms)));
  std::vector<std::string> errors = {ErrorOf(t, "turnstile"), ErrorOf(f, "floor"),
                                     ErrorOf(h, "floor handoff")};
  // Both floor measurements fail together when the floor cannot be opened.
  if (f.errors > 0 && h.errors > 0 && f.error == h.error) errors.pop_back();
  if (t.errors == 0 && t.handoff.count == 0) errors.push_back("turnstile: no handoff measured");
  PrintJson(Finish(j, errors, &ok));
  return ok;
}

// The fields of a drain that W4 and W5 share.
Json DrainJson(const HerdResult& r) {
  return Json()
      .Int("handoffs", static_cast<int64_t>(r.handoffs))
      .Num("handoff_p50_ms", r.handoff.p50_ms)
      .Num("handoff_p99_ms", r.handoff.p99_ms)
      .Num("handoff_mean_ms", r.handoff.mean_ms)
      .Num("drain_s", r.drain_seconds)
      .Num("handoffs_per_s", r.handoffs_per_second);
}

bool RunW4(const BenchOptions& o) {
  std::printf("\n== W4 herd: N waiters queued behind one holder, then drained (hold 0); N = ");
  for (size_t i = 0; i < o.herd_sizes.size(); ++i) {
    std::printf("%s%d", i ? ", " : "", o.herd_sizes[i]);
  }
  std::printf("; ZooKeeper fsync %s\n", Fsync(o));
  std::printf("   handoff = RELEASED at the holder -> ACQUIRED at the next; ZooKeeper counters are "
              "mntr deltas over the drain / N\n");
  std::printf("   floor: a chain of N+1 sequential nodes, each watched (getData) by its successor; "
              "handoff = delete issued -> watch fired\n");
  // One drain per N and side; which side drains first alternates with N
  // (see "fair comparison" above): neither is always the one that runs on
  // a ZooKeeper the other has just warmed.
  std::string firsts[2];  // the sizes at which the turnstile / the floor drains first
  for (size_t k = 0; k < o.herd_sizes.size(); ++k) {
    firsts[k % 2] += (firsts[k % 2].empty() ? "" : ", ") + std::to_string(o.herd_sizes[k]);
  }
  std::printf("   one drain per N and side: turnstile first at N = %s%s%s; ", firsts[0].c_str(),
              firsts[1].empty() ? "" : "; floor first at N = ", firsts[1].c_str());
  if (o.warmup.count() > 0) {
    std::printf("after a %.1f s warm-up\n", o.warmup.count() / 1000.0);
  } else {
    std::printf("no warm-up (--warmup 0)\n");
  }
  std::fflush(stdout);
  bool ok = true;
  std::vector<Json> herd;
  std::vector<std::string> all_errors;
  struct Line {
    HerdResult t, f;
  };
  std::vector<Line> lines;
  for (size_t k = 0; k < o.herd_sizes.size(); ++k) {
    const int n = o.herd_sizes[k];
    const bool floor_first = k % 2 == 1;
    HerdResult t, f;
    auto run_turnstile = [&] {
      t = RunTurnstileHerd(o, LockName(o, "w4-" + std::to_string(n)), n);
    };
    auto run_floor = [&] {
      std::string floor_error;
      if (auto floor = Floor::Open(o, &floor_error)) {
        f = floor->Chain("w4-" + std::to_string(n), n);
      } else {
        f.n = n;
        f.error = floor_error;
      }
    };
    if (floor_first) {
      run_floor();
      run_turnstile();
    } else {
      run_turnstile();
      run_floor();
    }
    // A failed side has no numbers: "-" in the table, null in the JSON.
    for (HerdResult* r : {&t, &f}) {
      if (r->error.empty()) continue;
      HerdResult blank;
      blank.n = r->n;
      blank.error = r->error;
      for (Latency* l : {&blank.handoff, &blank.handoff_signed, &blank.release_to_acquired}) {
        l->p50_ms = l->p99_ms = l->mean_ms = l->min_ms = l->max_ms = NAN;
      }
      blank.drain_seconds = blank.handoffs_per_second = NAN;
      blank.zk.packets = blank.zk.notifications = NAN;
      blank.zk.deleted_watches = blank.zk.changed_watches = NAN;
      blank.packets_per_handoff = blank.notifications_per_handoff = NAN;
      blank.queued_events_per_handoff = NAN;
      *r = blank;
    }
    std::printf("\n  -- N = %d (%s first)\n", n, floor_first ? "floor" : "turnstile");
    PrintTable({{"handoff p50 (ms)", t.handoff.p50_ms, f.handoff.p50_ms},
                {"handoff p99 (ms)", t.handoff.p99_ms, f.handoff.p99_ms},
                {"release sent -> next ACQUIRED p50 (ms)", t.release_to_acquired.p50_ms,
                 f.handoff.p50_ms},
                {"release sent -> next ACQUIRED p99 (ms)", t.release_to_acquired.p99_ms,
                 f.handoff.p99_ms},
                {"handoffs/s during the drain", t.handoffs_per_second, f.handoffs_per_second},
                {"ZK packets / handoff", t.packets_per_handoff, f.packets_per_handoff},
                {"ZK watch notifications / handoff", t.notifications_per_handoff,
                 f.notifications_per_handoff},
                {"gRPC QUEUED events / handoff", t.queued_events_per_handoff, NAN}});
    if (t.error.empty()) PrintHandoffNote(t.handoffs, t.acquired_before_released, t.handoff_signed);
    std::vector<std::string> errors;
    if (!t.error.empty()) errors.push_back("turnstile N=" + std::to_string(n) + ": " + t.error);
    if (!f.error.empty()) errors.push_back("floor N=" + std::to_string(n) + ": " + f.error);
    for (const auto& e : errors) {
      std::printf("  ERROR: %s\n", e.c_str());
      all_errors.push_back(e);
    }
    auto side = [](const HerdResult& r, bool turnstile) {
      Json j = DrainJson(r);
      j.Num("zk_packets", r.zk.packets)
          .Num("zk_watch_notifications", r.zk.notifications)
          .Num("zk_deleted_watches", r.zk.deleted_watches)
          .Num("zk_changed_watches", r.zk.changed_watches)
          .Num("packets_per_handoff", r.packets_per_handoff)
          .Num("watch_notifications_per_handoff", r.notifications_per_handoff);
      if (turnstile) {
        j.Num("queued_events_per_handoff", r.queued_events_per_handoff)
            .Int("acquired_before_released", static_cast<int64_t>(r.acquired_before_released))
            .Num("handoff_signed_p50_ms", r.handoff_signed.p50_ms)
            .Num("handoff_signed_min_ms", r.handoff_signed.min_ms)
            .Num("release_to_acquired_p50_ms", r.release_to_acquired.p50_ms)
            .Num("release_to_acquired_p99_ms", r.release_to_acquired.p99_ms);
      }
      return j;
    };
    Json entry;
    entry.Int("n", n)
        .Str("first", floor_first ? "floor" : "turnstile")
        .Obj("turnstile", side(t, true))
        .Obj("floor", side(f, false))
        .Obj("ratio", Json()
                          .Num("handoff_p50_ms", Ratio(t.handoff.p50_ms, f.handoff.p50_ms))
                          .Num("handoff_p99_ms", Ratio(t.handoff.p99_ms, f.handoff.p99_ms))
                          .Num("release_to_acquired_p50_ms",
                               Ratio(t.release_to_acquired.p50_ms, f.handoff.p50_ms))
                          .Num("release_to_acquired_p99_ms",
                               Ratio(t.release_to_acquired.p99_ms, f.handoff.p99_ms))
                          .Num("handoffs_per_s", Ratio(t.handoffs_per_second, f.handoffs_per_second))
                          .Num("packets_per_handoff",
                               Ratio(t.packets_per_handoff, f.packets_per_handoff))
                          .Num("watch_notifications_per_handoff",
                               Ratio(t.notifications_per_handoff, f.notifications_per_handoff)));
    if (errors.empty()) {
      entry.Null("error");
    } else {
      entry.Str("error", JoinErrors(errors));
    }
    herd.push_back(entry);
    lines.push_back({t, f});
  }

  std::printf("\n  -- against N (turnstile | floor)\n");
  std::printf("  %6s %21s %21s %21s %19s %15s %15s %9s\n", "N", "handoff p50 ms", "handoff p99 ms",
              "rel.sent->acq p50 ms", "handoffs/s", "packets/hoff", "notifs/hoff", "QUEUED/h");
  for (const Line& l : lines) {
    std::printf("  %6d %10s|%-10s %10s|%-10s %10s|%-10s %9s|%-9s %7s|%-7s %7s|%-7s %9s\n", l.t.n,
                Fmt(l.t.handoff.p50_ms).c_str(), Fmt(l.f.handoff.p50_ms).c_str(),
                Fmt(l.t.handoff.p99_ms).c_str(), Fmt(l.f.handoff.p99_ms).c_str(),
                Fmt(l.t.release_to_acquired.p50_ms).c_str(), Fmt(l.f.handoff.p50_ms).c_str(),
                Fmt(l.t.handoffs_per_second, "%.0f").c_str(),
                Fmt(l.f.handoffs_per_second, "%.0f").c_str(),
                Fmt(l.t.packets_per_handoff, "%.2f").c_str(),
                Fmt(l.f.packets_per_handoff, "%.2f").c_str(),
                Fmt(l.t.notifications_per_handoff, "%.2f").c_str(),
                Fmt(l.f.notifications_per_handoff, "%.2f").c_str(),
                Fmt(l.t.queued_events_per_handoff, "%.1f").c_str());
  }
  Json j = JsonFor(o, "w4");
  j.Num("warmup_s", o.warmup.count() / 1000.0).Arr("herd", herd);
  if (all_errors.empty()) {
    j.Num("ok", 1).Null("error");
  } else {
    j.Num("ok", 0).Str("error", JoinErrors(all_errors));
    ok = false;
  }
  PrintJson(j);
  return ok;
}


// W5's ZooKeeper restart, for BENCH_JSON.
Json RestartJson(const ScaleRestart& x) {
  return Json()
      .Str("command", x.command)
      .Int("exit_status", x.exit_status)
      .Num("command_s", x.command_seconds)
      .Num("zk_uptime_s", x.zk_uptime_seconds)
      .Num("watches_before", x.watches_before)
      .Num("watches_after", x.watches_after)
      .Num("watches_back_s", x.watches_back_seconds)
      .Num("watches_back_after_up_s", x.watches_back_after_up_seconds)
      .Int("sessions_before", x.sessions_before)
      .Int("sessions_after", x.sessions_after)
      .Int("sessions_same", x.sessions_same ? 1 : 0)
      .Int("nodes_before", x.nodes_before)
      .Int("nodes_after", x.nodes_after)
      .Int("holders_suspended", x.holders_suspended)
      .Int("holders_resumed", x.holders_resumed)
      .Int("holders_lost", x.holders_lost)
      .Int("waiters_other_events", x.waiters_other_events)
      .Int("checked", x.checked ? 1 : 0);
}

void PrintRestart(const ScaleRestart& x, int holders) {
  auto row = [](const char* metric, const std::string& value, const char* target) {
    std::printf("  %-48s %16s   %s\n", metric, value.c_str(), target);
  };
  std::printf("\n");
  row("ZooKeeper restart while all wait", "value", "target");
  row("restart command (s)", Fmt(x.command_seconds, "%.2f"), "");
  row("ZooKeeper's uptime when read after it (s)", Fmt(x.zk_uptime_seconds, "%.2f"),
      "< the time since the restart began");
  row("all watches back, from the restart's start (s)", Fmt(x.watches_back_seconds, "%.2f"),
      "within the session timeout");
  row("  from ZooKeeper serving again (s)", Fmt(x.watches_back_after_up_seconds, "%.2f"), "");
  row("zk_watch_count before -> after",
      Fmt(x.watches_before, "%.0f") + " -> " + Fmt(x.watches_after, "%.0f"), "equal");
  if (!x.checked) {  // the run stopped before the checks
    row("sessions owning W5's nodes before", std::to_string(x.sessions_before), "");
    return;
  }
  row("sessions owning W5's nodes before / after",
      std::to_string(x.sessions_before) + " / " + std::to_string(x.sessions_after) +
          (x.sessions_same ? ", same" : ", CHANGED"),
      "same (no expiry)");
  row("holders SUSPENDED / RESUMED / LOST",
      std::to_string(x.holders_suspended) + " / " + std::to_string(x.holders_resumed) + " / " +
          std::to_string(x.holders_lost),
      ("LOST 0 (" + std::to_string(holders) + " holders)").c_str());
  row("waiters told anything but QUEUED", std::to_string(x.waiters_other_events), "0");
}

// Issue 20's W5 memory target: the replica's RSS while all wait over that of
// gRPC alone (turnstile-bare-server) holding the same idle streams.
constexpr double kRssRatioToBareGrpcTarget = 1.15;

double RssRatioToBareGrpc(const ScaleResult& r) {
  return r.bare ? Ratio(r.rss_waiting_mb, r.bare->rss_waiting_mb) : NAN;
}

// The baseline's RSS growth per W5 waiter, as the replica's is counted (its
// holders' streams included).
double BareGrpcRssPerWaiterKb(const ScaleResult& r) {
  return r.bare ? (r.bare->rss_waiting_mb - r.bare->rss_before_mb) * 1024 / r.waiters : NAN;
}

void AddBareGrpcJson(const ScaleResult& r, Json* j) {
  const BareGrpcResult none;
  const BareGrpcResult& b = r.bare ? *r.bare : none;
  j->Num("bare_grpc_rss_mb", b.rss_waiting_mb)
      .Num("bare_grpc_rss_before_mb", b.rss_before_mb)
      .Num("bare_grpc_rss_per_waiter_kb", BareGrpcRssPerWaiterKb(r))
      .Num("rss_ratio_to_bare_grpc", RssRatioToBareGrpc(r))
      .Num("rss_ratio_to_bare_grpc_target", kRssRatioToBareGrpcTarget);
  if (!r.bare) {
    j->Null("bare_grpc");
    return;
  }
  Json detail;
  detail.Int("pid", b.pid)
      .Int("streams", b.streams)
      .Num("open_s", b.open_seconds)
      .Int("exit_status", b.exit_status);
  if (b.error.empty()) {
    detail.Null("error");
  } else {
    detail.Str("error", b.error);
  }
  j->Obj("bare_grpc", detail);
}

void PrintBareGrpc(const ScaleResult& r) {
  if (!r.bare) {
    std::printf("  (no --bare-server: the gRPC baseline was not measured)\n");
    return;
  }
  char target[32];
  std::snprintf(target, sizeof(target), "<= %.2f", kRssRatioToBareGrpcTarget);
  std::printf("  %-48s %12s\n", "bare gRPC server RSS, same idle streams (MB)",
              Fmt(r.bare->rss_waiting_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "bare gRPC server RSS before them (MB)",
              Fmt(r.bare->rss_before_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "bare gRPC server RSS growth per waiter (KB)",
              Fmt(BareGrpcRssPerWaiterKb(r), "%.2f").c_str());
  std::printf("  %-48s %12s   %s\n", "replica RSS / bare gRPC server RSS",
              Fmt(RssRatioToBareGrpc(r), "%.2f").c_str(), target);
}

// Prints W5's violations and completes its JSON line with them; W5 then
// exits 3.
int ReportViolations(const ScaleResult& r, Json j, const std::string& also) {
  for (const std::string& v : r.violations) std::printf("  VIOLATION: %s\n", v.c_str());
  if (r.violation_count > r.violations.size()) {
    std::printf("  VIOLATION: ... %llu in all\n",
                static_cast<unsigned long long>(r.violation_count));
  }
  std::string error = std::to_string(r.violation_count) +
                      " correctness violation(s); the first: " + r.violations.front();
  if (!also.empty()) error += "; " + also;
  PrintJson(j.Num("ok", 0).Str("error", error));
  return 3;
}

// W5's result: 0 ran and passed its checks, 1 did not run through, 3 a
// correctness check failed.
int RunW5(const BenchOptions& o) {
  std::printf("\n== W5 scale: %d Acquire streams waiting on one replica over %d channels; "
              "ZooKeeper fsync %s\n",
              o.w5_waiters, o.w5_channels, Fsync(o));
  std::printf("   every lock first taken by one holder; measured while all wait, %sthen "
              "drained (hold 0):\n   reference locks one by one, then the big lock, then the "
              "spread locks at once\n",
              o.w5_restart_zk.empty() ? "" : "ZooKeeper restarted, ");
  std::fflush(stdout);
  const ScaleResult r = RunTurnstileScale(o, LockName(o, "w5"));
  std::printf("  %d waiters: %d on one lock, %d over %d locks, %d reference locks x %d; "
              "%d holders\n",
              r.waiters, r.big_waiters, r.spread_waiters, r.spread_locks, r.control_locks,
              r.control_waiters, r.holders);
  Json j = JsonFor(o, "w5");
  j.Int("waiters", r.waiters)
      .Int("big_waiters", r.big_waiters)
      .Int("spread_locks", r.spread_locks)
      .Int("spread_waiters", r.spread_waiters)
      .Int("control_locks", r.control_locks)
      .Int("control_waiters", r.control_waiters)
      .Int("holders", r.holders)
      .Int("channels", o.w5_channels)
      .Num("queue_s", r.queue_seconds);
  if (r.restart) {
    j.Obj("zk_restart", RestartJson(*r.restart));
  } else {
    j.Null("zk_restart");
  }
  AddBareGrpcJson(r, &j);
  if (!r.error.empty()) {
    if (r.restart) PrintRestart(*r.restart, r.holders);
    std::printf("  ERROR: %s\n", r.error.c_str());
    // A run stopped by what a check flagged (e.g. a holder LOST across the
    // restart ends its stream) is a failed check.
    if (r.violation_count > 0) return ReportViolations(r, j, "the run stopped: " + r.error);
    PrintJson(j.Num("ok", 0).Str("error", r.error));
    return 1;
  }

  const double rss_per_waiter_kb = (r.rss_waiting_mb - r.rss_before_mb) * 1024 / r.waiters;
  std::printf("  all QUEUED after %.1f s\n", r.queue_seconds);
  std::printf("  %-48s %12s   %s\n", "while all wait", "value", "target");
  std::printf("  %-48s %12s\n", "replica RSS (MB)", Fmt(r.rss_waiting_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "replica RSS before W5 (MB)",
              Fmt(r.rss_before_mb, "%.1f").c_str());
  std::printf("  %-48s %12s\n", "replica RSS growth per waiter (KB)",
              Fmt(rss_per_waiter_kb, "%.2f").c_str());
  PrintBareGrpc(r);
  std::printf("  %-48s %12s   %s\n", "replica CPU while idle (% of one core)",
              Fmt(r.cpu_idle_percent, "%.2f").c_str(), "<= 2");
  std::printf("  %-48s %12s   = waiters (%d)\n", "ZooKeeper watches added (zk_watch_count)",
              Fmt(r.watch_delta, "%.0f").c_str(), r.waiters);
  if (o.server_pid <= 0) std::printf("  (no --server-pid: RSS and CPU not measured)\n");
  if (r.restart) PrintRestart(*r.restart, r.holders);

  const HerdResult& b = r.big;
  const HerdResult& c = r.control;
  std::printf("\n  %-40s %12s %12s %14s   %s\n", "drain", "big lock", "reference",
              "big/reference", "target");
  auto row = [](const char* metric, double big, double ref, const char* target,
                const char* fmt = "%.3f") {
    std::printf("  %-40s %12s %12s %14s   %s\n", metric, Fmt(big, fmt).c_str(),
                Fmt(ref, fmt).c_str(), Fmt(Ratio(big, ref), "%.2f").c_str(), target);
  };
  row("waiters per lock", r.big_waiters, r.control_waiters, "", "%.0f");
  row("handoffs/s", b.handoffs_per_second, c.handoffs_per_second, ">= 0.67");
  row("release sent -> next ACQUIRED p50 (ms)", b.release_to_acquired.p50_ms,
      c.release_to_acquired.p50_ms, "<= 1.5");
  row("release sent -> next ACQUIRED p99 (ms)", b.release_to_acquired.p99_ms,
      c.release_to_acquired.p99_ms, "");
  row("handoff p50 (ms)", b.handoff.p50_ms, c.handoff.p50_ms, "");
  std::printf("  spread: %d locks drained at once: %llu handoffs in %.2f s, %.0f handoffs/s, "
              "release sent -> next ACQUIRED p50 %s ms\n",
              r.spread_locks, static_cast<unsigned long long>(r.spread.handoffs),
              r.spread.drain_seconds, r.spread.handoffs_per_second,
              Fmt(r.spread.release_to_acquired.p50_ms).c_str());

  auto drain = [](const HerdResult& h) {
    return DrainJson(h)
        .Num("release_to_acquired_p50_ms", h.release_to_acquired.p50_ms)
        .Num("release_to_acquired_p99_ms", h.release_to_acquired.p99_ms)
        .Int("acquired_before_released", static_cast<int64_t>(h.acquired_before_released));
  };
  j.Num("rss_before_mb", r.rss_before_mb)
      .Num("rss_waiting_mb", r.rss_waiting_mb)
      .Num("rss_per_waiter_kb", rss_per_waiter_kb)
      .Num("idle_s", r.idle_seconds)
      .Num("cpu_idle_percent", r.cpu_idle_percent)
      .Num("zk_watch_count", r.watch_count)
      .Num("zk_watch_delta", r.watch_delta)
      .Obj("big", drain(b))
      .Obj("control", drain(c))
      .Obj("spread", drain(r.spread))
      .Obj("ratio", Json()
                        .Num("handoffs_per_s", Ratio(b.handoffs_per_second, c.handoffs_per_second))
                        .Num("release_to_acquired_p50_ms",
                             Ratio(b.release_to_acquired.p50_ms, c.release_to_acquired.p50_ms))
                        .Num("handoff_p50_ms", Ratio(b.handoff.p50_ms, c.handoff.p50_ms)))
      .Obj("checks", Json()
                         .Int("grants", static_cast<int64_t>(r.grants_checked))
                         .Int("lock_nodes", r.lock_nodes_checked)
                         .Int("nodes_left", r.nodes_left)
                         .Int("violations", static_cast<int64_t>(r.violation_count)));

  // The baseline failing is a workload that did not run through (exit 1),
  // unless a correctness check failed too (exit 3).
  const std::string bare_error =
      r.bare && !r.bare->error.empty() ? "gRPC baseline: " + r.bare->error : "";
  if (r.violation_count == 0) {
    std::printf("  checks: one node per contender while all wait; %s%llu grants, each contender "
                "granted once, in fencing-token order per lock, none before the previous holder's "
                "release; %d lock nodes empty after the drain\n",
                r.restart ? "across the ZooKeeper restart the same sessions, every watch back, "
                            "no hold lost, waiters told only QUEUED; "
                          : "",
                static_cast<unsigned long long>(r.grants_checked), r.lock_nodes_checked);
    if (!bare_error.empty()) {
      std::printf("  ERROR: %s\n", bare_error.c_str());
      PrintJson(j.Num("ok", 0).Str("error", bare_error));
      return 1;
    }
    PrintJson(j.Num("ok", 1).Null("error"));
    return 0;
  }
  return ReportViolations(r, j, bare_error);
}

}  // namespace

int RunBench(int argc, char** argv) {
  BenchOptions o;
  int rc = ParseFlags(argc, argv, &o);
  if (rc == -1) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (rc != 0) return rc;
  o.run_tag = std::to_string(getpid());

  // The warm-up runs once, before the first workload, if any of them
  // compares with the floor (w5 does not).
  const bool warm = o.warmup.count() > 0 &&
                    std::any_of(o.workloads.begin(), o.workloads.end(),
                                [](const std::string& w) { return w != "w5"; });
  const std::string slices =
      o.slices > 1 ? std::to_string(o.slices) + " interleaved slices" : "not interleaved";
  std::printf("turnstile bench: server %s, ZooKeeper %s (fsync %s), %.1f s per workload side "
              "(w1..w3: %s), %.1f s warm-up%s\n",
              o.server.c_str(), o.zk.c_str(), Fsync(o), o.duration.count() / 1000.0,
              slices.c_str(), warm ? o.warmup.count() / 1000.0 : 0.0, o.quick ? " (--quick)" : "");
  std::string error;
  if (!CheckServer(o, Millis(10000), &error)) {
    std::fprintf(stderr, "turnstile bench: %s\n", error.c_str());
    return 1;
  }
  Mntr mntr;
  if (!ReadMntr(o.zk, &mntr, &error)) {
    std::fprintf(stderr, "turnstile bench: ZooKeeper mntr at %s: %s\n", o.zk.c_str(),
                 error.c_str());
    return 1;
  }
  auto version = mntr.find("zk_version");
  std::printf("ZooKeeper %s; client cores %u\n",
              version == mntr.end() ? "?" : version->second.substr(0, version->second.find(',')).c_str(),
              std::thread::hardware_concurrency());
  std::fflush(stdout);
  // The secure sides matter only to w1..w3.
  const bool secure = !o.secure.empty() &&
                      std::any_of(o.workloads.begin(), o.workloads.end(), [](const std::string& w) {
                        return w == "w1" || w == "w2" || w == "w3";
                      });
  std::vector<SecureCheck> checks;
  if (secure) checks = CheckSecureServers(o);
  if (warm) RunWarmup(o);
  if (warm && secure) WarmSecureServers(o, o.warmup / 4);

  bool ok = true;
  bool violated = false;
  for (const std::string& w : o.workloads) {
    if (w == "w1") ok &= RunSeparateLocks(o, "w1", 1);
    if (w == "w2") ok &= RunW2(o);
    if (w == "w3") ok &= RunSeparateLocks(o, "w3", o.w3_clients);
    if (secure && w == "w1") ok &= RunSecurity(o, "w1", 1, false, checks);
    if (secure && w == "w2") ok &= RunSecurity(o, "w2", o.w2_clients, true, checks);
    if (secure && w == "w3") ok &= RunSecurity(o, "w3", o.w3_clients, false, checks);
    if (w == "w4") ok &= RunW4(o);
    if (w == "w5") {
      const int w5 = RunW5(o);
      ok &= w5 == 0;
      violated |= w5 == 3;
    }
  }
  std::printf("\nturnstile bench: %s\n",
              violated ? "done; CORRECTNESS CHECKS FAILED (see VIOLATION above)"
              : ok     ? "done"
                       : "done, with errors (see above)");
  std::fflush(stdout);
  return violated ? 3 : ok ? 0 : 1;
}

}  // namespace turnstile::bench
