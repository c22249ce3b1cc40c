// nemesis_client: one careful lock user of the partition fault suite
// (tests/nemesis/run_nemesis.py). One OS process per client, so the nemesis
// can SIGKILL it mid-hold.
//
// Loop: Acquire one of the lock names (turnstile C++ client library), then,
// while holding, a few operations on the shared fenced register of that lock
// name, each preceded by a look at lock.status(): the client stops using the
// lock the moment the state is not kHeld or the validity it was given is
// shorter than --valid-margin. Then Release. SIGTERM/SIGINT end the loop after
// the current hold (released).
//
// The register (one per lock name, in --register-dir) is a small text file
// "<highest_token> <value>\n" guarded by flock() on a sibling lock file, with
// an append-only log <lock>.reglog of every operation (JSON lines):
//   read(token):  rejected if token < highest, else highest = token, returns value
//   write(token, v): rejected if token < highest, else highest = token, value = v
//
// History: JSON lines appended to --history (one file per client id, reopened
// in append mode by a restarted client), each written with one write() so a
// killed client leaves whole lines. Times are CLOCK_MONOTONIC nanoseconds
// (std::chrono::steady_clock on Linux), comparable across processes.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/json_quote.h"
#include "client/lib/client.h"

namespace {

using turnstile::JsonQuote;
using turnstile::client::Client;
using turnstile::client::LockState;
using turnstile::client::LockStateName;
using turnstile::client::LockStatus;
using turnstile::client::Millis;

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// valid_for as JSON: -1 for "no deadline" (Millis::max()).
int64_t ValidMs(const LockStatus& s) {
  return s.valid_for == Millis::max() ? -1 : static_cast<int64_t>(s.valid_for.count());
}

struct Options {
  std::string id;
  std::string target;
  std::string replica;  // name of the replica behind target (r1, r2, r3)
  std::vector<std::string> locks = {"nemesis"};
  std::string register_dir;
  std::string history;
  int64_t ttl_ms = 0;
  int64_t wait_timeout_ms = 3000;
  int64_t min_ops = 2, max_ops = 5;
  int64_t op_gap_min_ms = 20, op_gap_max_ms = 100;
  int64_t valid_margin_ms = 100;
  uint64_t seed = 1;
};

class History {
 public:
  explicit History(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      std::fprintf(stderr, "nemesis_client: open %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(2);
    }
  }
  // `fields` is the inside of a JSON object without braces; "t" and "pid"
  // are added. One write() per line: a killed client leaves whole lines.
  void Log(const std::string& client, const std::string& fields) {
    std::string line = absl::StrCat("{\"t\":", NowNs(), ",\"client\":", JsonQuote(client),
                                    ",\"pid\":", getpid(), ",", fields, "}\n");
    std::lock_guard<std::mutex> l(mu_);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
  }

 private:
  std::mutex mu_;
  int fd_ = -1;
};

// One fenced register per lock name.
class Register {
 public:
  Register(const std::string& dir, const std::string& lock) {
    base_ = dir + "/" + lock;
    lock_fd_ = ::open((base_ + ".flock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) {
      std::fprintf(stderr, "nemesis_client: open register lock: %s\n", std::strerror(errno));
      std::exit(2);
    }
  }

  struct Result {
    bool accepted = false;
    int64_t value = 0;    // read: the value; write: the value before
    uint64_t highest = 0;  // highest token seen, before this op
  };

  // kind: "read" or "write".
  Result Op(const std::string& kind, uint64_t token, int64_t new_value, const std::string& client,
            const std::string& hold) {
    while (::flock(lock_fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        std::perror("flock");
        std::exit(2);
      }
    }
    Result r;
    uint64_t highest = 0;
    int64_t value = 0;
    if (FILE* f = std::fopen((base_ + ".reg").c_str(), "r")) {
      unsigned long long h = 0;
      long long v = 0;
      if (std::fscanf(f, "%llu %lld", &h, &v) == 2) {
        highest = h;
        value = v;
      }
      std::fclose(f);
    }
    r.highest = highest;
    r.value = value;
    r.accepted = token >= highest;
    if (r.accepted) {
      int64_t stored = kind == "write" ? new_value : value;
      std::string tmp = base_ + ".reg.tmp";
      FILE* f = std::fopen(tmp.c_str(), "w");
      if (f == nullptr) {
        std::perror("register write");
        std::exit(2);
      }
      std::fprintf(f, "%llu %lld\n", static_cast<unsigned long long>(token),
                   static_cast<long long>(stored));
      std::fflush(f);
      std::fclose(f);
      std::rename(tmp.c_str(), (base_ + ".reg").c_str());
    }
    std::string line = absl::StrCat(
        "{\"t\":", NowNs(), ",\"op\":", JsonQuote(kind), ",\"token\":", token,
        ",\"highest\":", highest, ",\"prev\":", value, ",\"new\":",
        kind == "write" ? new_value : value, ",\"accepted\":", r.accepted ? "true" : "false",
        ",\"client\":", JsonQuote(client), ",\"hold\":", JsonQuote(hold), "}\n");
    int lfd = ::open((base_ + ".reglog").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lfd >= 0) {
      ssize_t ignored = ::write(lfd, line.data(), line.size());
      (void)ignored;
      ::close(lfd);
    }
    ::flock(lock_fd_, LOCK_UN);
    return r;
  }

 private:
  std::string base_;
  int lock_fd_ = -1;
};

bool ParseInt(const char* s, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return false;
  *out = v;
  return true;
}

void Usage() {
  std::fprintf(stderr,
               "usage: nemesis_client --id ID --target HOST:PORT --replica NAME --register-dir DIR\n"
               "         --history FILE [--locks a,b] [--ttl-ms N] [--wait-timeout-ms N]\n"
               "         [--ops MIN,MAX] [--op-gap-ms MIN,MAX] [--valid-margin-ms N] [--seed N]\n");
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    int64_t n = 0;
    if (a == "--id") {
      o->id = v;
    } else if (a == "--target") {
      o->target = v;
    } else if (a == "--replica") {
      o->replica = v;
    } else if (a == "--register-dir") {
      o->register_dir = v;
    } else if (a == "--history") {
      o->history = v;
    } else if (a == "--locks") {
      o->locks = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (a == "--ttl-ms" && ParseInt(v, &n)) {
      o->ttl_ms = n;
    } else if (a == "--wait-timeout-ms" && ParseInt(v, &n)) {
      o->wait_timeout_ms = n;
    } else if (a == "--valid-margin-ms" && ParseInt(v, &n)) {
      o->valid_margin_ms = n;
    } else if (a == "--seed" && ParseInt(v, &n)) {
      o->seed = static_cast<uint64_t>(n);
    } else if (a == "--ops" || a == "--op-gap-ms") {
      std::vector<std::string> p = absl::StrSplit(v, ',');
      int64_t lo = 0, hi = 0;
      if (p.size() != 2 || !ParseInt(p[0].c_str(), &lo) || !ParseInt(p[1].c_str(), &hi) || lo > hi ||
          lo < 0)
        return false;
      if (a == "--ops") {
        if (lo < 1) return false;
        o->min_ops = lo;
        o->max_ops = hi;
      } else {
        o->op_gap_min_ms = lo;
        o->op_gap_max_ms = hi;
      }
    } else {
      return false;
    }
  }
  return !o->id.empty() && !o->target.empty() && !o->register_dir.empty() && !o->history.empty() &&
         !o->locks.empty();
}

// Sleeps `ms` unless asked to stop (the workload's pacing, not a wait for an
// event).
void Pace(int64_t ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!g_stop.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
        std::chrono::milliseconds(20), until - std::chrono::steady_clock::now()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    Usage();
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  History hist(o.history);
  const std::string me = o.id;
  std::mt19937_64 rng(o.seed ^ (static_cast<uint64_t>(getpid()) << 20));
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };

  turnstile::client::ClientOptions copts;
  copts.target = o.target;
  copts.default_owner = me;
  auto client_or = Client::Connect(copts);
  if (!client_or.ok()) {
    hist.Log(me, absl::StrCat("\"ev\":\"fatal\",\"error\":",
                              JsonQuote(client_or.status().ToString())));
    return 1;
  }
  std::unique_ptr<Client> client = std::move(*client_or);
  std::vector<std::unique_ptr<Register>> regs;
  for (const auto& l : o.locks) regs.push_back(std::make_unique<Register>(o.register_dir, l));

  hist.Log(me, absl::StrCat("\"ev\":\"start\",\"replica\":", JsonQuote(o.replica),
                            ",\"target\":", JsonQuote(o.target), ",\"ttl_ms\":", o.ttl_ms));
  int64_t hold_seq = 0;
  while (!g_stop.load()) {
    const size_t li = static_cast<size_t>(uniform(0, static_cast<int64_t>(o.locks.size()) - 1));
    const std::string& lock_name = o.locks[li];
    const std::string hold = absl::StrCat(me, "-p", getpid(), "-h", ++hold_seq);
    // The hold id is known to the callback before the grant (events between
    // Acquire's return and the grant record carry it too).
    auto cb_hold = std::make_shared<std::string>(hold);
    turnstile::client::AcquireOptions ao;
    ao.wait_timeout = Millis(o.wait_timeout_ms);
    ao.ttl = Millis(o.ttl_ms);
    ao.on_change = [&hist, me, cb_hold, lock_name](const LockStatus& s) {
      hist.Log(me, absl::StrCat("\"ev\":\"change\",\"hold\":", JsonQuote(*cb_hold),
                                ",\"lock\":", JsonQuote(lock_name), ",\"state\":",
                                JsonQuote(LockStateName(s.state)), ",\"valid_ms\":", ValidMs(s),
                                ",\"reason\":", JsonQuote(s.lost_reason), ",\"message\":",
                                JsonQuote(s.message)));
    };
    hist.Log(me, absl::StrCat("\"ev\":\"acquire\",\"hold\":", JsonQuote(hold), ",\"lock\":",
                              JsonQuote(lock_name)));
    auto lock_or = client->Acquire(lock_name, ao);
    if (!lock_or.ok()) {
      hist.Log(me, absl::StrCat("\"ev\":\"acquire_fail\",\"hold\":", JsonQuote(hold),
                                ",\"lock\":", JsonQuote(lock_name), ",\"code\":",
                                static_cast<int>(lock_or.status().code()), ",\"error\":",
                                JsonQuote(std::string(lock_or.status().message()))));
      Pace(uniform(50, 200));
      continue;
    }
    turnstile::client::Lock lock = std::move(*lock_or);
    const uint64_t token = lock.fencing_token();
    LockStatus gs = lock.status();
    Register& reg = *regs[li];
    const int64_t nops = uniform(o.min_ops, o.max_ops);
    // The pacing of this hold, drawn up front so the grant record can say
    // how long the hold means to last (the nemesis aims faults at holds
    // that will outlast them).
    std::vector<int64_t> gaps(static_cast<size_t>(nops), 0);
    int64_t plan_ms = 0;
    for (int64_t k = 1; k < nops; ++k) {
      gaps[static_cast<size_t>(k)] = uniform(o.op_gap_min_ms, o.op_gap_max_ms);
      plan_ms += gaps[static_cast<size_t>(k)];
    }
    hist.Log(me, absl::StrCat("\"ev\":\"grant\",\"hold\":", JsonQuote(hold), ",\"lock\":",
                              JsonQuote(lock_name), ",\"token\":", token, ",\"lease\":",
                              JsonQuote(lock.lease_id()), ",\"replica\":", JsonQuote(o.replica),
                              ",\"state\":", JsonQuote(LockStateName(gs.state)),
                              ",\"valid_ms\":", ValidMs(gs), ",\"ops\":", nops,
                              ",\"plan_ms\":", plan_ms));
    int64_t last = 0;
    std::string end_reason = "done";
    for (int64_t k = 0; k < nops; ++k) {
      if (k > 0) Pace(gaps[static_cast<size_t>(k)]);
      if (g_stop.load()) {
        end_reason = "stopping";
        break;
      }
      LockStatus s = lock.status();
      if (s.state != LockState::kHeld) {
        end_reason = absl::StrCat("state_", LockStateName(s.state));
        hist.Log(me, absl::StrCat("\"ev\":\"stop_using\",\"hold\":", JsonQuote(hold),
                                  ",\"lock\":", JsonQuote(lock_name), ",\"why\":\"state\",\"state\":",
                                  JsonQuote(LockStateName(s.state)), ",\"valid_ms\":", ValidMs(s),
                                  ",\"reason\":", JsonQuote(s.lost_reason)));
        break;
      }
      if (s.valid_for != Millis::max() && s.valid_for.count() < o.valid_margin_ms) {
        end_reason = "valid_for_ran_out";
        hist.Log(me, absl::StrCat("\"ev\":\"stop_using\",\"hold\":", JsonQuote(hold),
                                  ",\"lock\":", JsonQuote(lock_name),
                                  ",\"why\":\"valid_for\",\"state\":",
                                  JsonQuote(LockStateName(s.state)), ",\"valid_ms\":", ValidMs(s)));
        break;
      }
      const bool is_read = k == 0;
      const int64_t want = last + 1;
      hist.Log(me, absl::StrCat("\"ev\":\"op_start\",\"hold\":", JsonQuote(hold), ",\"lock\":",
                                JsonQuote(lock_name), ",\"token\":", token, ",\"op\":",
                                is_read ? "\"read\"" : "\"write\"", ",\"valid_ms\":", ValidMs(s),
                                is_read ? "" : absl::StrCat(",\"value\":", want)));
      Register::Result r = reg.Op(is_read ? "read" : "write", token, want, me, hold);
      hist.Log(me, absl::StrCat("\"ev\":\"op_end\",\"hold\":", JsonQuote(hold), ",\"lock\":",
                                JsonQuote(lock_name), ",\"token\":", token, ",\"op\":",
                                is_read ? "\"read\"" : "\"write\"", ",\"accepted\":",
                                r.accepted ? "true" : "false", ",\"prev\":", r.value,
                                ",\"highest\":", r.highest));
      if (!r.accepted) {
        end_reason = "fenced";
        break;
      }
      last = is_read ? r.value : want;
    }
    const int64_t rel_start = NowNs();
    hist.Log(me, absl::StrCat("\"ev\":\"release_start\",\"hold\":", JsonQuote(hold),
                              ",\"lock\":", JsonQuote(lock_name), ",\"end\":",
                              JsonQuote(end_reason)));
    absl::Status rs = lock.Release();
    LockStatus fs = lock.status();
    hist.Log(me, absl::StrCat("\"ev\":\"release\",\"hold\":", JsonQuote(hold), ",\"lock\":",
                              JsonQuote(lock_name), ",\"code\":", static_cast<int>(rs.code()),
                              ",\"error\":", JsonQuote(std::string(rs.message())),
                              ",\"state\":", JsonQuote(LockStateName(fs.state)),
                              ",\"took_ms\":", (NowNs() - rel_start) / 1000000));
    Pace(uniform(0, 30));
  }
  hist.Log(me, "\"ev\":\"exit\"");
  return 0;
}
