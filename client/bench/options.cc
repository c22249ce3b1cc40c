// turnstile bench: the flags, on client/common's FlagSet.
#include "client/bench/options.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/bench/security.h"
#include "client/common/flags.h"

namespace turnstile::bench {
namespace {

// --help: kIntro, FlagSet's list of the flags, then kAbout.
constexpr char kIntro[] =
    "usage: turnstile bench [flags]\n"
    "\n"
    "Benchmarks a running turnstiled replica and, in the same run, the raw\n"
    "ZooKeeper floor it is built on; prints a table per workload and one\n"
    "line \"BENCH_JSON {...}\" per workload.\n"
    "\n";
// What the flags do not say: the workloads, what W4 and W5 need of the
// replica, and the exit codes.
constexpr char kAbout[] =
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

constexpr char kSecureServerHelp[] =
    "repeatable (up to 6), as --secure-server LABEL=ADDRESS,ca=FILE\n"
    "      [,cert=FILE,key=FILE][,server-name=NAME][,pid=PID][,rules=N]:\n"
    "      another replica (same ZooKeeper, same flags but its security) over\n"
    "      which w1..w3 also run, after their floor tables. ca: the CAs of its\n"
    "      server certificate (TLS); cert, key: the bench's client certificate\n"
    "      (mutual TLS); server-name: the name that certificate carries if not\n"
    "      the address's host; pid: for its CPU per cycle; rules: its\n"
    "      --authz-file has N rules (a label), which must grant the bench's\n"
    "      identity acquire on names starting \"bench-\" and not on\n"
    "      \"probe-denied-...\". Each side is checked first (granted with its\n"
    "      credentials; plaintext refused; with cert, TLS without a certificate\n"
    "      refused; with rules, \"probe-denied-...\" PERMISSION_DENIED). Then\n"
    "      each of w1..w3 also runs on --server (plaintext) and on every secure\n"
    "      side, one slice each per round (--slices rounds, every other one\n"
    "      reversed: ABCDDCBA...), and prints each side's ratio to plaintext\n"
    "      and the largest policy's over the smallest's, plus one line\n"
    "      BENCH_JSON {\"workload\":\"wN-security\",...}. Channels are opened\n"
    "      before the first slice: per-call cost, not handshakes.\n"
    "      deploy/local/bench.sh --security starts such replicas";

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
    if (item != "w1" && item != "w2" && item != "w3" && item != "w4" && item != "w5" &&
        item != "w6") {
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

using Setter = std::function<absl::Status(const std::string&)>;

// A flag's check: `accept(value)` false refuses it with "--NAME: "VALUE" WHY".
Setter Checked(const std::string& name, const std::string& why,
               std::function<bool(const std::string&)> accept) {
  return [name, why, accept = std::move(accept)](const std::string& value) {
    if (accept(value)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": \"", value, "\" ", why));
  };
}

bool DurationIn(const std::string& value, Millis lo, Millis hi, Millis* out) {
  auto d = ParseDuration(value);
  if (!d.ok() || *d < lo || *d > hi) return false;
  *out = *d;
  return true;
}

bool OneInt(const std::string& value, long lo, long hi, int* out) {
  std::vector<int> v;
  if (!ParseIntList(value, &v, lo, hi) || v.size() != 1) return false;
  *out = v[0];
  return true;
}

}  // namespace

int ParseFlags(int argc, char** argv, BenchOptions* o) {
  bool duration_set = false, herd_set = false, w5_waiters_set = false, w5_idle_set = false;
  bool warmup_set = false, bare_server_set = false;
  FlagSet f("turnstile bench");
  f.String("server", &o->server, "turnstiled address");
  f.String("zk", &o->zk,
           "ZooKeeper for the floor and `mntr` (mntr is read from the first\n"
           "      server, which should be the one the replica uses)");
  f.Custom("zk-root", o->zk_root,
           "the replica's --zk-root (W5 lists its lock nodes there after the drain)",
           Checked("zk-root", "must be an absolute znode path", [o](const std::string& v) {
             if (v.empty() || v[0] != '/' || v == "/" || v.back() == '/') return false;
             o->zk_root = v;
             return true;
           }));
  f.Custom("zk-fsync", o->zk_fsync,
           "on|off: whether that ZooKeeper fsyncs (forceSync); only a label for\n"
           "      the tables and JSON",
           Checked("zk-fsync", "must be on or off", [o](const std::string& v) {
             if (v != "on" && v != "off") return false;
             o->zk_fsync = v;
             return true;
           }));
  f.Custom("server-pid", "",
           "the replica's process id, for its CPU and context switches per cycle\n"
           "      (w1..w3) and W5's memory and CPU (read from /proc; without it\n"
           "      they are not measured)",
           Checked("server-pid", "is not a process id", [o](const std::string& v) {
             return OneInt(v, 1, 1 << 30, &o->server_pid);
           }));
  f.Custom("metrics", o->metrics,
           "the replica's /metrics address (host:port), scraped by w6",
           Checked("metrics", "must be host:port", [o](const std::string& v) {
             o->metrics = v;
             return v.find(':') != std::string::npos;
           }));
  f.Custom("zk-pid", "",
           "ZooKeeper's process id, for its CPU and context switches per cycle\n"
           "      on each side (w1..w3)",
           Checked("zk-pid", "is not a process id", [o](const std::string& v) {
             return OneInt(v, 1, 1 << 30, &o->zk_pid);
           }));
  f.Custom("workloads", "w1,w2,w3,w4,w5", "a list of w1,w2,w3,w4,w5,w6 (w6 only when named)",
           Checked("workloads", "is not a list of w1,w2,w3,w4,w5,w6",
                   [o](const std::string& v) { return ParseWorkloads(v, &o->workloads); }));
  f.Custom("duration", FormatDuration(o->duration),
           "per workload and side, e.g. 5s, 500ms (100ms..1h)",
           Checked("duration", "must be 100ms..1h", [o, &duration_set](const std::string& v) {
             return duration_set = DurationIn(v, Millis(100), Millis(3600 * 1000), &o->duration);
           }));
  f.Custom("warmup", FormatDuration(o->warmup),
           "unmeasured cycles on both sides before the first of w1..w4 (0 for\n"
           "      none; up to 10m): ZooKeeper's JIT and the replica warm up before\n"
           "      anything is measured",
           Checked("warmup", "must be 0..10m", [o, &warmup_set](const std::string& v) {
             return warmup_set = DurationIn(v, Millis(0), Millis(600 * 1000), &o->warmup);
           }));
  f.Custom("slices", std::to_string(o->slices),
           "w1..w3 run each side's --duration as N slices, interleaved with the\n"
           "      other side's in Thue-Morse order, A = turnstile, B = floor: ABBA,\n"
           "      ABBABAAB, ... (1..16, fewer if a slice would be under 100 ms;\n"
           "      1 = turnstile, then floor)",
           Checked("slices", "must be 1..16",
                   [o](const std::string& v) { return OneInt(v, 1, 16, &o->slices); }));
  f.Custom("herd-sizes", "10,100,1000,10000", "W4 queue lengths, a list of 1..100000",
           Checked("herd-sizes", "must be a list of 1..100000", [o, &herd_set](const std::string& v) {
             return herd_set = ParseIntList(v, &o->herd_sizes, 1, 100000);
           }));
  f.Custom("w5-waiters", std::to_string(o->w5_waiters), "W5 waiting streams (2..100000)",
           Checked("w5-waiters", "must be 2..100000", [o, &w5_waiters_set](const std::string& v) {
             return w5_waiters_set = OneInt(v, 2, 100000, &o->w5_waiters);
           }));
  f.Custom("w5-idle", FormatDuration(o->w5_idle),
           "W5 window for the idle CPU reading (100ms..10m)",
           Checked("w5-idle", "must be 100ms..10m", [o, &w5_idle_set](const std::string& v) {
             return w5_idle_set = DurationIn(v, Millis(100), Millis(600 * 1000), &o->w5_idle);
           }));
  f.Custom("w5-restart-zk", "",
           "a shell command (sh -c) that restarts the replica's ZooKeeper on the\n"
           "      same address and data dir and returns once it serves; W5 runs it\n"
           "      while all waiters wait and checks the replica's reconnection\n"
           "      (default: none)",
           Checked("w5-restart-zk", "must be a shell command", [o](const std::string& v) {
             o->w5_restart_zk = v;
             return !v.empty();
           }));
  f.Custom("bare-server", "",
           "turnstile-bare-server, for W5's gRPC baseline (default: the one next\n"
           "      to this program, if any; \"\" = none)",
           [o, &bare_server_set](const std::string& v) {
             o->bare_server = v;  // "" = no baseline
             bare_server_set = true;
             return absl::OkStatus();
           });
  f.Bool("quick", &o->quick,
         "1s per workload, a 500ms warm-up, herd sizes 10,50, W5 with 2000\n"
         "      waiters and a 1s idle window (for tests)");
  f.Custom("secure-server", "", kSecureServerHelp, [o](const std::string& v) {
    auto refuse = [&v](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("--secure-server: \"", v, "\" ", why));
    };
    SecureServer server;
    std::string why;
    if (!ParseSecureServer(v, &server, &why)) return refuse(why);
    for (const SecureServer& other : o->secure) {
      if (other.label == server.label) return refuse("repeats a label");
    }
    if (o->secure.size() >= 6) return refuse("is one too many (at most 6)");
    o->secure.push_back(server);
    return absl::OkStatus();
  });

  // FlagSet reads argv from index 1.
  std::vector<char*> args = {const_cast<char*>("turnstile bench")};
  args.insert(args.end(), argv, argv + argc);
  bool help = false;
  auto positional = f.Parse(static_cast<int>(args.size()), args.data(), &help);
  if (help) {
    std::printf("%s%s%s", kIntro, f.FlagList().c_str(), kAbout);
    return -1;
  }
  if (!positional.ok()) {
    std::fprintf(stderr, "turnstile bench: %s\n", std::string(positional.status().message()).c_str());
    return 2;
  }
  if (!positional->empty()) {
    std::fprintf(stderr, "turnstile bench: unexpected argument \"%s\" (see --help)\n",
                 positional->front().c_str());
    return 2;
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

}  // namespace turnstile::bench
