// turnstile: command-line client for turnstiled, over the C++ client library.
//
//   turnstile [global flags] acquire NAME [--wait D] [--ttl D] [--hold D]
//   turnstile [global flags] run NAME [NAME...] [--timeout D] [--ttl D] [--grace D] -- CMD ARGS...
//   turnstile [global flags] elect NAME VALUE [--timeout D] [--grace D] -- CMD ARGS...
//   turnstile [global flags] observe NAME [--count N]
//   turnstile [global flags] describe NAME
//   turnstile [global flags] check NAME TOKEN [--stale]
//   turnstile [global flags] list [PREFIX]
//   turnstile [global flags] release LEASE_ID
//   turnstile [global flags] revoke LEASE_ID [REASON]
//   turnstile [global flags] health [SERVICE]
//   turnstile help [COMMAND]   (also -h, --help, COMMAND --help)
//   turnstile bench [bench flags]   (runs turnstile-bench: the CLI itself links
//                                    neither the engine nor the ZooKeeper client)
//
// Exit codes: 0 success (run: the command's own code, 128+N if it died of
// signal N); 1 error talking to the server; 2 usage; 75 not acquired (lock
// held on try-once, or wait timeout); 76 the lock was lost while `run`'s
// command ran (the command was stopped); 77 / 78 `check`: the token is
// SUPERSEDED / WAITING (0: CURRENT); 127 the command could not be run;
// 128+N a stop signal N (SIGINT 130, SIGTERM 143, SIGHUP 129) ended a wait
// (acquire, run, elect: nothing is held, no command started) or a unary
// command. `health` exits 0 only when the replica reports SERVING, 1
// otherwise (NOT_SERVING, or not reachable). See GeneralUsage().
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli_common.h"
#include "client/common/flags.h"
#include "client/common/lock_name.h"
#include "client/json_quote.h"
#include "client/lib/client.h"
#include "client/lib/coordination.h"
#include "client/lib/tls.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::cli {
// The election and observation commands (cli_coordination.cc).
int CmdElect(const Globals& g, StopSignals& stop, int argc, char** argv);
int CmdObserve(const Globals& g, StopSignals& stop, int argc, char** argv);
}  // namespace turnstile::cli

namespace {

using namespace turnstile::cli;  // NOLINT(build/namespaces): the CLI's own helpers
using turnstile::JsonQuote;

int CmdAcquire(const Globals& g, StopSignals& stop, int argc, char** argv) {
  Millis wait(3600 * 1000), ttl(0), hold(0);
  bool shared = false;
  FlagSet f("turnstile acquire NAME");
  f.Duration("wait", &wait, "how long to wait for the lock (0 = try once)");
  f.Bool("shared", &shared, "a shared (read) hold: together with other shared holders");
  int64_t max_holders = 0;
  f.Int("max-holders", &max_holders,
        "N > 0: one of an N-holder semaphore (at most N hold at once; all must agree on N)");
  f.Duration("ttl", &ttl, "lease ttl, kept alive automatically (0 = while connected)");
  f.Duration("hold", &hold, "release after this long (0 = hold until interrupted)");
  bool revoke_holders = false;
  std::string revoke_reason;
  f.Bool("revoke-holders", &revoke_holders, "once queued, ask the holders ahead to let go");
  f.String("revoke-reason", &revoke_reason, "the reason they are told (with --revoke-holders)");
  Millis lock_delay(0);
  f.Duration("lock-delay", &lock_delay,
             "if the hold ends involuntarily, the next grant waits this long (0..60s)");
  bool help = false;
  auto args = f.Parse(argc, argv, &help);
  const std::string usage = CommandHelp(
      "turnstile [global flags] acquire NAME [flags]",
      "Waits for NAME (at most --wait), prints ACQUIRED with the fencing token and the\n"
      "lease id, and holds it until interrupted (Ctrl-C, SIGTERM), --hold passes, or the\n"
      "hold is lost. While waiting on a terminal it shows the live queue position.\n"
      "A stop signal while waiting gives the wait up: nothing stays queued.\n"
      "Exit: 0 released; 75 not acquired (held, with --wait 0; or --wait passed);\n"
      "76 lost while held; 130 / 143 / 129 SIGINT / SIGTERM / SIGHUP while waiting;\n"
      "1 server error; 2 usage.",
      &f);
  if (help) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (!args.ok() || args->size() != 1) {
    std::fprintf(stderr, "turnstile acquire: %s\n\n%s", args.ok() ? "needs exactly one NAME" :
                 std::string(args.status().message()).c_str(), usage.c_str());
    return kExitUsage;
  }
  if (max_holders < 0 || max_holders > turnstile::kMaxSemaphoreHoldersEver) {
    std::fprintf(stderr, "--max-holders must be 0 (not a semaphore) or 1..%d\n",
                 turnstile::kMaxSemaphoreHoldersEver);
    return kExitUsage;
  }
  auto client = Connect(g);
  if (!client.ok()) return ReportError(g, client.status());
  const bool tty = isatty(STDERR_FILENO) && !g.json();
  LockWatch watch;
  AcquireOptions o;
  o.wait_timeout = wait;
  o.ttl = ttl;
  o.shared = shared;
  o.max_holders = static_cast<int32_t>(max_holders);
  o.revoke_holders = revoke_holders;
  o.revoke_reason = revoke_reason;
  o.lock_delay = lock_delay;
  o.on_revoke = [&](const std::string& requester, const std::string& reason) {
    if (g.json()) {
      PrintLine(absl::StrCat("{\"event\":\"revoke_requested\",\"requester\":", JsonQuote(requester),
                             ",\"reason\":", JsonQuote(reason), "}"));
    } else {
      PrintLine(absl::StrCat("REVOKE_REQUESTED requester=", requester, " reason=", reason));
    }
  };
  o.on_queued = [&](int64_t position) {
    if (g.json()) {
      PrintLine(absl::StrCat("{\"event\":\"queued\",\"position\":", position, "}"));
    } else if (tty) {
      std::fprintf(stderr, "\rwaiting for %s: %lld ahead   ", (*args)[0].c_str(),
                   static_cast<long long>(position));
      std::fflush(stderr);
    }
  };
  o.on_change = [&](const LockStatus& s) {
    watch.OnChange(s);
    if (s.state == LockState::kReleased) return;  // reported once, below
    if (g.json()) {
      PrintLine(StatusJson("state", s));
    } else {
      PrintLine(absl::StrCat(turnstile::client::LockStateName(s.state),
                             s.lost_reason.empty() ? "" : " reason=" + s.lost_reason,
                             s.state == LockState::kLost || s.valid_for == Millis::max()
                                 ? std::string()
                                 : " safe_for=" + turnstile::FormatDuration(s.valid_for)));
    }
  };
  const auto asked_at = std::chrono::steady_clock::now();
  stop.BeginWait();
  auto lock = (*client)->Acquire((*args)[0], o);
  const Millis waited =
      std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - asked_at);
  if (tty) std::fputs("\r\033[K", stderr);
  if (const int sig = stop.EndWait(); sig != 0) {
    if (lock.ok()) (void)lock->Release();  // granted as the signal came
    return ReportAbandoned(g, sig, (*args)[0]);
  }
  if (!lock.ok()) return ReportError(g, lock.status());
  if (g.json()) {
    PrintLine(absl::StrCat("{\"event\":\"acquired\",\"name\":", JsonQuote((*args)[0]),
                           ",\"fencing_token\":", lock->fencing_token(),
                           ",\"lease_id\":", JsonQuote(lock->lease_id()), "}"));
  } else {
    const Millis valid = lock->status().valid_for;
    PrintLine(absl::StrCat("ACQUIRED fencing_token=", lock->fencing_token(),
                           " lease_id=", lock->lease_id(),
                           valid == Millis::max()
                               ? std::string()
                               : " safe_for=" + turnstile::FormatDuration(valid),
                           " waited=", turnstile::FormatDuration(waited)));
  }
  const auto held_since = std::chrono::steady_clock::now();
  // Hold until interrupted, --hold passes, or the lock is lost.
  std::atomic<bool> done{false};
  std::thread waker([&] {
    std::unique_lock<std::mutex> l(watch.mu);
    watch.cv.wait(l, [&] { return watch.lost || done.load(); });
    l.unlock();
    if (!done.load()) stop.Wake();  // wakes the signal wait below
  });
  stop.Wait(hold.count() > 0 ? std::optional<Millis>(hold) : std::nullopt);
  {
    std::lock_guard<std::mutex> l(watch.mu);
    done = true;
    watch.cv.notify_all();
  }
  waker.join();
  bool lost;
  {
    std::lock_guard<std::mutex> l(watch.mu);
    lost = watch.lost;
  }
  absl::Status r = lock->Release();
  if (lost) return kExitLost;
  if (!r.ok()) return ReportError(g, r);
  const Millis held =
      std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - held_since);
  if (g.json()) {
    PrintLine(absl::StrCat("{\"event\":\"released\",\"held_ms\":", held.count(), "}"));
  } else {
    PrintLine("RELEASED held=" + turnstile::FormatDuration(held));
  }
  return 0;
}

int CmdRun(const Globals& g, StopSignals& stop, int argc, char** argv) {
  Millis timeout(3600 * 1000), ttl(0), grace(10000);
  FlagSet f("turnstile run NAME [NAME...] [flags] -- CMD ARGS...");
  f.Duration("timeout", &timeout, "how long to wait for the lock (0 = try once)");
  f.Duration("ttl", &ttl, "lease ttl, kept alive automatically while CMD runs (0 = while connected)");
  bool shared = false;
  f.Bool("shared", &shared, "a shared (read) hold: together with other shared holders");
  int64_t max_holders = 0;
  f.Int("max-holders", &max_holders,
        "N > 0: one of an N-holder semaphore (at most N hold at once; all must agree on N)");
  f.Duration("grace", &grace, "if the lock is lost: time between SIGTERM and SIGKILL to CMD");
  bool revoke_holders = false;
  std::string revoke_reason, on_revoke = "term";
  f.Bool("revoke-holders", &revoke_holders, "once queued, ask the holders ahead to let go");
  f.String("revoke-reason", &revoke_reason, "the reason they are told (with --revoke-holders)");
  f.String("on-revoke", &on_revoke,
           "when asked to let go (REVOKE_REQUESTED): term = SIGTERM to CMD (the lock is "
           "released once CMD has exited), ignore = keep the lock while CMD runs");
  Millis lock_delay(0);
  f.Duration("lock-delay", &lock_delay,
             "if the hold ends involuntarily, the next grant waits this long (0..60s)");
  bool help = false;
  // NAME [NAME...] -- CMD ARGS: the names are the arguments before "--";
  // without "--", the first argument is the name and the rest the command.
  int dashes = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      dashes = i;
      break;
    }
  }
  auto args = f.Parse(dashes < 0 ? argc : dashes, argv, &help);
  const std::string usage = CommandHelp(
      "turnstile [global flags] run NAME [NAME...] [flags] -- CMD [ARGS...]",
      "Runs CMD while holding NAME. CMD gets TURNSTILE_LOCK_NAME, TURNSTILE_FENCING_TOKEN\n"
      "and TURNSTILE_LEASE_ID in its environment. The lock is released only after CMD has\n"
      "exited, whatever ended the hold, so two holders' commands never overlap:\n"
      "  - asked to let go (turnstile revoke): see --on-revoke;\n"
      "  - the lock is lost: CMD gets SIGTERM, then SIGKILL after --grace;\n"
      "  - SIGINT / SIGTERM to turnstile: passed to CMD (SIGHUP as SIGTERM).\n"
      "A stop signal while waiting gives the wait up: nothing stays queued and CMD never\n"
      "starts. CMD does not outlive turnstile: if turnstile is killed (even kill -9), CMD\n"
      "gets SIGKILL.\n"
      "Several names (run A B C -- CMD): all are taken or none, within --timeout in all,\n"
      "always in byte order of the names (two such runs never deadlock); losing any one\n"
      "stops CMD. CMD also gets TURNSTILE_LOCK_COUNT and, for i = 0..count-1 in that order,\n"
      "TURNSTILE_LOCK_NAME_i, TURNSTILE_FENCING_TOKEN_i and TURNSTILE_LEASE_ID_i (the\n"
      "unnumbered variables name the first).\n"
      "Exit: CMD's code (128+N if killed by signal N); 75 not acquired; 76 lock lost;\n"
      "127 CMD could not be run; 130 / 143 / 129 SIGINT / SIGTERM / SIGHUP while waiting;\n"
      "1 server error; 2 usage.",
      &f);
  if (help) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  std::vector<std::string> names, command;
  if (args.ok()) {
    if (dashes < 0) {
      if (!args->empty()) names.push_back((*args)[0]);
      command.assign(args->begin() + std::min<size_t>(1, args->size()), args->end());
    } else {
      names = *args;
      for (int i = dashes + 1; i < argc; ++i) command.push_back(argv[i]);
    }
  }
  if (!args.ok() || names.empty() || command.empty()) {
    std::fprintf(stderr, "turnstile run: %s\n\n%s", args.ok() ? "needs NAME [NAME...] -- CMD [ARGS...]" :
                 std::string(args.status().message()).c_str(), usage.c_str());
    return kExitUsage;
  }
  if (on_revoke != "term" && on_revoke != "ignore") {
    std::fprintf(stderr, "turnstile run: --on-revoke must be term or ignore, not \"%s\"\n",
                 on_revoke.c_str());
    return kExitUsage;
  }
  if (max_holders < 0 || max_holders > turnstile::kMaxSemaphoreHoldersEver) {
    std::fprintf(stderr, "--max-holders must be 0 (not a semaphore) or 1..%d\n",
                 turnstile::kMaxSemaphoreHoldersEver);
    return kExitUsage;
  }
  auto order = turnstile::client::CanonicalLockOrder(names);
  if (!order.ok()) {
    std::fprintf(stderr, "turnstile: %s\n", std::string(order.status().message()).c_str());
    return kExitUsage;
  }
  const std::string what = names.size() == 1 ? "lock " + names[0] : "a lock of the set";
  auto client = Connect(g);
  if (!client.ok()) return ReportError(g, client.status());
  LockWatch watch;
  AcquireOptions o;
  o.wait_timeout = timeout;
  o.ttl = ttl;
  o.shared = shared;
  o.max_holders = static_cast<int32_t>(max_holders);
  o.revoke_holders = revoke_holders;
  o.revoke_reason = revoke_reason;
  o.lock_delay = lock_delay;
  o.on_change = [&](const LockStatus& s) { watch.OnChange(s); };
  // The child's pid once it runs (0 before): a revocation request is passed
  // to it as SIGTERM (--on-revoke term). One that arrives before the
  // command starts is passed as soon as it does.
  std::atomic<pid_t> running{0};
  std::atomic<bool> revoke_pending{false};
  o.on_revoke = [&](const std::string& requester, const std::string& reason) {
    std::fprintf(stderr, "turnstile: %s asks to release %s (%s)%s\n", requester.c_str(),
                 what.c_str(), reason.c_str(),
                 on_revoke == "term" ? "; sending SIGTERM to the command" : "; ignored");
    if (g.json()) {
      PrintLine(absl::StrCat("{\"event\":\"revoke_requested\",\"requester\":", JsonQuote(requester),
                             ",\"reason\":", JsonQuote(reason), "}"));
    }
    if (on_revoke != "term") return;
    revoke_pending = true;
    if (pid_t p = running.load(); p > 0) kill(p, SIGTERM);
  };
  std::vector<turnstile::client::Lock> locks;
  const std::string waited_for = names.size() == 1 ? names[0] : absl::StrJoin(names, " ");
  stop.BeginWait();
  if (names.size() == 1) {
    auto lock = (*client)->Acquire(names[0], o);
    if (!lock.ok()) {
      if (const int sig = stop.EndWait(); sig != 0) return ReportAbandoned(g, sig, waited_for);
      return ReportError(g, lock.status());
    }
    locks.push_back(std::move(*lock));
  } else {
    auto all = turnstile::client::AcquireAll(client->get(), names, o);
    if (!all.ok()) {
      if (const int sig = stop.EndWait(); sig != 0) return ReportAbandoned(g, sig, waited_for);
      return ReportError(g, all.status());
    }
    locks = std::move(all->locks());
  }
  auto release_all = [&] {
    absl::Status first;
    for (auto it = locks.rbegin(); it != locks.rend(); ++it) {
      absl::Status s = it->Release();
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  };

  std::vector<std::string> env = {"TURNSTILE_LOCK_NAME=" + locks[0].name(),
                                  absl::StrCat("TURNSTILE_FENCING_TOKEN=", locks[0].fencing_token()),
                                  "TURNSTILE_LEASE_ID=" + locks[0].lease_id()};
  if (locks.size() > 1) {
    env.push_back(absl::StrCat("TURNSTILE_LOCK_COUNT=", locks.size()));
    for (size_t i = 0; i < locks.size(); ++i) {
      env.push_back(absl::StrCat("TURNSTILE_LOCK_NAME_", i, "=", locks[i].name()));
      env.push_back(absl::StrCat("TURNSTILE_FENCING_TOKEN_", i, "=", locks[i].fencing_token()));
      env.push_back(absl::StrCat("TURNSTILE_LEASE_ID_", i, "=", locks[i].lease_id()));
    }
  }
  ChildOutcome child = RunChild(
      stop, watch, command, env, grace, &running, what, [&](pid_t pid) {
        if (revoke_pending.load()) kill(pid, SIGTERM);
        if (!g.json()) return;
        if (locks.size() == 1) {
          PrintLine(absl::StrCat("{\"event\":\"running\",\"name\":", JsonQuote(locks[0].name()),
                                 ",\"fencing_token\":", locks[0].fencing_token(), ",\"lease_id\":",
                                 JsonQuote(locks[0].lease_id()), ",\"pid\":", pid, "}"));
          return;
        }
        std::string held = "[";
        for (size_t i = 0; i < locks.size(); ++i) {
          absl::StrAppend(&held, i ? "," : "", "{\"name\":", JsonQuote(locks[i].name()),
                          ",\"fencing_token\":", locks[i].fencing_token(), ",\"lease_id\":",
                          JsonQuote(locks[i].lease_id()), "}");
        }
        PrintLine(absl::StrCat("{\"event\":\"running\",\"locks\":", held, "],\"pid\":", pid, "}"));
      });
  // Only now, CMD having exited: the next holder's command cannot overlap.
  absl::Status released = release_all();
  if (child.abandoned != 0) return ReportAbandoned(g, child.abandoned, waited_for);
  if (!child.started) return child.code;  // the command never ran; nothing to report
  if (child.lost) {
    if (g.json()) PrintLine("{\"event\":\"lost\"}");
    return kExitLost;
  }
  if (g.json()) PrintLine(absl::StrCat("{\"event\":\"exited\",\"code\":", child.code, "}"));
  if (!released.ok()) ReportError(g, released);
  return child.code;
}

// The arguments of a command with no flags of its own (describe, list,
// release, revoke, health), `min`..`max` of them; nullopt with *rc set for
// --help (0) or a usage error (2, the help on stderr).
std::optional<std::vector<std::string>> PlainArgs(const std::string& command,
                                                  const std::string& usage_line,
                                                  const std::string& about, size_t min, size_t max,
                                                  int argc, char** argv, int* rc) {
  FlagSet f("turnstile " + command);
  bool help = false;
  auto args = f.Parse(argc, argv, &help);
  const std::string usage = CommandHelp("turnstile [global flags] " + usage_line, about, nullptr);
  if (help) {
    std::fputs(usage.c_str(), stdout);
    *rc = 0;
    return std::nullopt;
  }
  if (!args.ok() || args->size() < min || args->size() > max) {
    std::fprintf(stderr, "turnstile %s: %s\n\n%s", command.c_str(),
                 args.ok() ? ("expects " + usage_line).c_str()
                           : std::string(args.status().message()).c_str(),
                 usage.c_str());
    *rc = kExitUsage;
    return std::nullopt;
  }
  return *args;
}

int CmdCheck(const Globals& g, int argc, char** argv) {
  FlagSet f("turnstile check");
  bool stale = false, help = false;
  f.Bool("stale", &stale,
         "skip ZooKeeper's sync: the view of the ZooKeeper server the replica talks to\n"
         "(cheaper; may miss changes of the last moments, up to ~10 s when that\n"
         "server is cut off from its leader)");
  const std::string usage = CommandHelp(
      "turnstile [global flags] check NAME TOKEN [--stale]",
      "Whether fencing token TOKEN (from ACQUIRED) still belongs to a hold of NAME,\n"
      "for a resource server that cannot remember the highest token it has seen.\n"
      "Prints CURRENT, SUPERSEDED or WAITING and the highest holder's token (with\n"
      "--output json one object {name, fencing_token, verdict, highest_holder_token,\n"
      "linearizable}). Linearizable unless --stale.\n"
      "Exit: 0 CURRENT; 77 SUPERSEDED (released, lost, expired, or never this lock's);\n"
      "78 WAITING (a contender never granted); 2 usage or INVALID_ARGUMENT (bad NAME,\n"
      "TOKEN 0); 1 other errors (UNAVAILABLE: unknown, PERMISSION_DENIED...). Apply a\n"
      "write only on exit 0.",
      &f);
  auto args = f.Parse(argc, argv, &help);
  if (help) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  uint64_t token = 0;
  std::string bad;
  if (!args.ok()) {
    bad = std::string(args.status().message());
  } else if (args->size() != 2) {
    bad = "expects check NAME TOKEN [--stale]";
  } else if (!absl::SimpleAtoi((*args)[1], &token)) {
    bad = absl::StrCat("TOKEN \"", (*args)[1], "\" is not a fencing token (an unsigned integer)");
  }
  if (!bad.empty()) {
    std::fprintf(stderr, "turnstile check: %s\n\n%s", bad.c_str(), usage.c_str());
    return kExitUsage;
  }
  const std::string& name = (*args)[0];
  auto stub = turnstile::v1::LockService::NewStub(Channel(g));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + g.timeout);
  turnstile::v1::CheckTokenRequest req;
  req.set_name(name);
  req.set_fencing_token(token);
  req.set_allow_stale(stale);
  turnstile::v1::CheckTokenResponse resp;
  if (grpc::Status s = stub->CheckToken(&ctx, req, &resp); !s.ok()) {
    // Every error but bad input (2) is 1, DEADLINE_EXCEEDED included (not
    // ReportError's 75, "not acquired", which means nothing here).
    const int rc = ReportError(g, FromGrpc(s));
    return rc == kExitUsage ? rc : kExitError;
  }
  using Response = turnstile::v1::CheckTokenResponse;
  const std::string verdict = Response::Verdict_Name(resp.verdict());
  if (g.json()) {
    PrintLine(absl::StrCat("{\"name\":", JsonQuote(name), ",\"fencing_token\":", token,
                           ",\"verdict\":", JsonQuote(verdict), ",\"highest_holder_token\":",
                           resp.highest_holder_token(), ",\"linearizable\":",
                           resp.linearizable() ? "true" : "false", "}"));
  } else {
    PrintLine(absl::StrCat(verdict, " highest_holder_token=", resp.highest_holder_token(),
                           resp.linearizable() ? "" : " (stale view)"));
  }
  switch (resp.verdict()) {
    case Response::CURRENT: return 0;
    case Response::WAITING: return kExitWaiting;
    case Response::SUPERSEDED: return kExitSuperseded;
    default: return kExitError;  // a verdict this CLI does not know
  }
}

int CmdDescribe(const Globals& g, int argc, char** argv) {
  int rc = 0;
  auto parsed = PlainArgs(
      "describe", "describe NAME",
      "Prints the holders of NAME, then its waiters, in queue order, one line each:\n"
      "HOLDER|WAITER position=N owner=... fencing_token=... replica=... held=/waiting=...\n"
      "(a semaphore first prints SEMAPHORE max_holders=N holders=H waiters=W). With\n"
      "--output json one object {name, contenders: [{role, position, owner, ...}]}.\n"
      "A free lock (no holders or waiters) is not an error: it prints\n"
      "FREE holders=0 waiters=0 (JSON: {name, contenders: []}).\n"
      "Exit: 0 (a free lock too); 1 server error; 2 usage.",
      1, 1, argc, argv, &rc);
  if (!parsed) return rc;
  const std::vector<std::string>& args = *parsed;
  auto stub = turnstile::v1::LockService::NewStub(Channel(g));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + g.timeout);
  turnstile::v1::DescribeRequest req;
  req.set_name(args[0]);
  turnstile::v1::DescribeResponse resp;
  grpc::Status s = stub->Describe(&ctx, req, &resp);
  // The server's NOT_FOUND means nobody holds or waits for NAME: an answer
  // (the lock is free), as every client library gives it, not a failure.
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    PrintLine(g.json() ? absl::StrCat("{\"name\":", JsonQuote(args[0]), ",\"contenders\":[]}")
                       : "FREE holders=0 waiters=0");
    return 0;
  }
  if (!s.ok()) return ReportError(g, FromGrpc(s));
  auto one = [&](const turnstile::v1::Contender& c, const char* role) {
    if (g.json()) {
      std::string meta = "{";
      for (const auto& [k, v] : c.metadata()) {
        if (meta.size() > 1) meta += ",";
        absl::StrAppend(&meta, JsonQuote(k), ":", JsonQuote(v));
      }
      meta += "}";
      return absl::StrCat("{\"role\":", JsonQuote(role), ",\"position\":", c.position(),
                          ",\"owner\":", JsonQuote(c.owner()), ",\"fencing_token\":",
                          c.fencing_token(), ",\"replica_id\":", JsonQuote(c.replica_id()),
                          ",\"since_unix\":", c.since().seconds(),
                          c.has_granted() ? absl::StrCat(",\"granted_unix\":", c.granted().seconds())
                                          : std::string(),
                          ",\"metadata\":", meta, "}");
    }
    // How long it has held (from its grant, where known) or waited (from
    // when it queued), as people read durations.
    const int64_t now_ms = std::chrono::duration_cast<Millis>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    auto since_ms = [](const google::protobuf::Timestamp& t) {
      return t.seconds() * 1000 + t.nanos() / 1000000;
    };
    std::string age;
    if (std::string(role) == "WAITER") {
      age = " waiting=" + turnstile::FormatDuration(Millis(std::max<int64_t>(0, now_ms - since_ms(c.since()))));
    } else if (c.has_granted()) {
      age = " held=" + turnstile::FormatDuration(Millis(std::max<int64_t>(0, now_ms - since_ms(c.granted()))));
    }
    return absl::StrCat(role, " position=", c.position(), " owner=", c.owner(),
                        " fencing_token=", c.fencing_token(), " replica=", c.replica_id(), age);
  };
  if (!g.json() && resp.max_holders() > 0) {
    PrintLine(absl::StrCat("SEMAPHORE max_holders=", resp.max_holders(),
                           " holders=", resp.holders_size(), " waiters=", resp.waiters_size()));
  }
  if (g.json()) {
    std::string out = absl::StrCat("{\"name\":", JsonQuote(resp.name()),
                                   resp.max_holders() > 0
                                       ? absl::StrCat(",\"max_holders\":", resp.max_holders())
                                       : std::string(),
                                   ",\"contenders\":[");
    bool first = true;
    for (const auto& c : resp.holders()) {
      absl::StrAppend(&out, first ? "" : ",", one(c, "holder"));
      first = false;
    }
    for (const auto& c : resp.waiters()) {
      absl::StrAppend(&out, first ? "" : ",", one(c, "waiter"));
      first = false;
    }
    PrintLine(out + "]}");
  } else {
    for (const auto& c : resp.holders()) PrintLine(one(c, "HOLDER"));
    for (const auto& c : resp.waiters()) PrintLine(one(c, "WAITER"));
  }
  return 0;
}

int CmdList(const Globals& g, int argc, char** argv) {
  int rc = 0;
  auto parsed = PlainArgs(
      "list", "list [PREFIX]",
      "Prints the names of the locks that have holders or waiters (starting with PREFIX),\n"
      "in byte order, one per line; \"(truncated)\" on stderr if the server cut the list.\n"
      "Exit: 0; 1 server error; 2 usage.",
      0, 1, argc, argv, &rc);
  if (!parsed) return rc;
  const std::vector<std::string>& args = *parsed;
  auto stub = turnstile::v1::LockService::NewStub(Channel(g));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + g.timeout);
  turnstile::v1::ListRequest req;
  if (!args.empty()) req.set_prefix(args[0]);
  turnstile::v1::ListResponse resp;
  grpc::Status s = stub->List(&ctx, req, &resp);
  if (!s.ok()) return ReportError(g, FromGrpc(s));
  if (g.json()) {
    std::string out = "{\"names\":[";
    for (int i = 0; i < resp.names_size(); ++i) {
      absl::StrAppend(&out, i ? "," : "", JsonQuote(resp.names(i)));
    }
    PrintLine(absl::StrCat(out, "],\"truncated\":", resp.truncated() ? "true" : "false", "}"));
  } else {
    for (const auto& n : resp.names()) PrintLine(n);
    if (resp.truncated()) std::fprintf(stderr, "(truncated)\n");
  }
  return 0;
}

// Asks the holder of LEASE_ID to let go (cooperative revocation).
int CmdRevoke(const Globals& g, int argc, char** argv) {
  int rc = 0;
  auto parsed = PlainArgs(
      "revoke", "revoke LEASE_ID [REASON]",
      "Asks the holder of LEASE_ID to let go (cooperative: the holder decides). The holder\n"
      "is told who asks (--owner, default user@host/pid) and REASON. `turnstile run` passes\n"
      "it to its command as SIGTERM (see run --on-revoke) and `turnstile elect` steps down;\n"
      "either lets the lock go only once its command has exited.\n"
      "Exit: 0 asked; 1 server error (NOT_FOUND: no such lease); 2 usage.",
      1, 2, argc, argv, &rc);
  if (!parsed) return rc;
  const std::vector<std::string>& args = *parsed;
  auto stub = turnstile::v1::LockService::NewStub(Channel(g));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + g.timeout);
  turnstile::v1::RevokeRequest req;
  req.set_lease_id(args[0]);
  req.set_requester(g.owner.empty() ? DefaultOwner() : g.owner);
  if (args.size() == 2) req.set_reason(args[1]);
  turnstile::v1::RevokeResponse resp;
  grpc::Status s = stub->Revoke(&ctx, req, &resp);
  if (!s.ok()) return ReportError(g, FromGrpc(s));
  PrintLine(g.json() ? "{\"revoke_requested\":true}" : "REVOKE_REQUESTED");
  return 0;
}

int CmdRelease(const Globals& g, int argc, char** argv) {
  int rc = 0;
  auto parsed = PlainArgs(
      "release", "release LEASE_ID",
      "Releases the lease LEASE_ID (through any replica), e.g. one left by a holder that\n"
      "cannot release it itself. Its holder sees the hold lost.\n"
      "Exit: 0 released; 1 server error (NOT_FOUND: no such lease); 2 usage.",
      1, 1, argc, argv, &rc);
  if (!parsed) return rc;
  const std::vector<std::string>& args = *parsed;
  auto stub = turnstile::v1::LockService::NewStub(Channel(g));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + g.timeout);
  turnstile::v1::ReleaseRequest req;
  req.set_lease_id(args[0]);
  turnstile::v1::ReleaseResponse resp;
  grpc::Status s = stub->Release(&ctx, req, &resp);
  if (!s.ok()) return ReportError(g, FromGrpc(s));
  PrintLine(g.json() ? "{\"released\":true}" : "RELEASED");
  return 0;
}

// grpc.health.v1.Health/Check for the whole server: what container
// HEALTHCHECKs and scripts use (Kubernetes probes speak gRPC health natively).
// An optional SERVICE asks about that service ("liveness": the process
// answers, whether or not ZooKeeper is reachable).
int CmdHealth(const Globals& g, int argc, char** argv) {
  int rc = 0;
  auto parsed = PlainArgs(
      "health", "health [SERVICE]",
      "Asks the replica's gRPC health service (grpc.health.v1) and prints SERVING or\n"
      "NOT_SERVING. Without SERVICE: ready, i.e. its ZooKeeper sessions are up. SERVICE\n"
      "\"liveness\": the process answers, whether or not ZooKeeper is reachable.\n"
      "Exit: 0 only when SERVING; 1 otherwise (NOT_SERVING, unknown SERVICE, not\n"
      "reachable within --rpc-timeout); 2 usage.",
      0, 1, argc, argv, &rc);
  if (!parsed) return rc;
  const std::vector<std::string>& args = *parsed;
  auto stub = grpc::health::v1::Health::NewStub(Channel(g));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + g.timeout);
  grpc::health::v1::HealthCheckRequest req;
  if (!args.empty()) req.set_service(args[0]);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    ReportError(g, FromGrpc(s));
    return kExitError;
  }
  const std::string status = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  PrintLine(g.json() ? absl::StrCat("{\"status\":", JsonQuote(status), "}") : status);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : kExitError;
}

// `turnstile bench ARGS`: execs turnstile-bench with ARGS, found next to
// this program (an install: both in bin/), in bench/ beside it (the build
// tree), or on PATH. Returns only if it could not be started.
int ExecBench(const StopSignals& stop, int argc, char** argv) {
  std::vector<std::string> candidates;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    candidates.push_back(dir + "turnstile-bench");
    candidates.push_back(dir + "bench/turnstile-bench");
  }
  std::vector<char*> args;
  std::string name = "turnstile-bench";
  args.push_back(name.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  // The bench handles its own signals: give it the mask this process had.
  pthread_sigmask(SIG_UNBLOCK, &stop.set(), nullptr);
  for (const std::string& path : candidates) {
    if (access(path.c_str(), X_OK) == 0) execv(path.c_str(), args.data());
  }
  execvp(name.c_str(), args.data());
  std::fprintf(stderr, "turnstile bench: cannot run turnstile-bench (%s): install it next to "
               "turnstile or on PATH\n", std::strerror(errno));
  return kExitError;
}

// The general help (turnstile --help, -h, help).
std::string GeneralUsage() {
  Globals defaults;
  FlagSet globals("turnstile");
  RegisterGlobals(&globals, &defaults);
  return absl::StrCat(
      "Usage: turnstile [global flags] COMMAND [args] [flags]\n\n"
      "Commands:\n"
      "  acquire NAME            hold NAME until interrupted; prints the fencing token\n"
      "  run NAME -- CMD ARGS    run CMD while holding NAME (several names: all or none)\n"
      "  elect NAME VALUE -- CMD run CMD while leader of election NAME, with VALUE\n"
      "  observe NAME            print the holders of NAME (the leader) at every change\n"
      "  describe NAME           holders and waiters of NAME, in order\n"
      "  check NAME TOKEN        is fencing token TOKEN a current hold of NAME?\n"
      "                          (exit 0 CURRENT, 77 SUPERSEDED, 78 WAITING)\n"
      "  list [PREFIX]           locks with holders or waiters\n"
      "  release LEASE_ID        release a lease (from any replica)\n"
      "  revoke LEASE_ID [WHY]   ask the holder of a lease to let go (it decides)\n"
      "  health [SERVICE]        SERVING or NOT_SERVING (exit 0 only when SERVING);\n"
      "                          SERVICE \"liveness\": the process answers\n"
      "  bench                   benchmark against a replica and ZooKeeper\n"
      "  help [COMMAND]          this, or a command's own help (also COMMAND --help)\n\n"
      "Global flags (before COMMAND; each also read from its environment variable; "
      "flags win):\n",
      FlagLines(globals),
      "\nExit codes: 0 success (run, elect: CMD's own code, 128+N if signal N ended it);\n"
      "1 server error; 2 usage; 75 not acquired (held, try-once; or the wait timed out);\n"
      "76 the lock or leadership was lost; 77 / 78 check: SUPERSEDED / WAITING;\n"
      "127 CMD could not be run;\n"
      "130 / 143 / 129: SIGINT / SIGTERM / SIGHUP while waiting (the wait is given up:\n"
      "nothing stays queued, CMD never starts).\n");
}

bool IsHelp(const std::string& a) { return a == "--help" || a == "-h" || a == "help"; }

// Runs COMMAND with its arguments (sub_argv[0] is the command word).
int Dispatch(const Globals& g, StopSignals& stop, const std::string& cmd, int sub_argc,
             char** sub_argv) {
  if (cmd == "acquire") return CmdAcquire(g, stop, sub_argc, sub_argv);
  if (cmd == "run") return CmdRun(g, stop, sub_argc, sub_argv);
  if (cmd == "elect") return CmdElect(g, stop, sub_argc, sub_argv);
  if (cmd == "observe") return CmdObserve(g, stop, sub_argc, sub_argv);
  if (cmd == "bench") return ExecBench(stop, sub_argc, sub_argv);
  if (cmd == "describe") return CmdDescribe(g, sub_argc, sub_argv);
  if (cmd == "check") return CmdCheck(g, sub_argc, sub_argv);
  if (cmd == "list") return CmdList(g, sub_argc, sub_argv);
  if (cmd == "release") return CmdRelease(g, sub_argc, sub_argv);
  if (cmd == "revoke") return CmdRevoke(g, sub_argc, sub_argv);
  if (cmd == "health") return CmdHealth(g, sub_argc, sub_argv);
  std::fprintf(stderr, "turnstile: unknown command \"%s\" (turnstile help: the commands)\n",
               cmd.c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before any thread: SIGINT, SIGTERM and SIGHUP go to its thread.
  StopSignals stop;
  Globals g;
  // Global flags come before the command; the command parses the rest.
  int cmd_index = 1;
  while (cmd_index < argc) {
    const std::string a = argv[cmd_index];
    if (a == "-h" || a == "--help") {
      ++cmd_index;
      continue;
    }
    if (a.rfind("--", 0) != 0) break;
    cmd_index += a.find('=') == std::string::npos ? 2 : 1;  // --flag value / --flag=value
  }
  FlagSet globals("turnstile");
  RegisterGlobals(&globals, &g);
  bool help = false;
  auto gargs = globals.Parse(std::min(cmd_index, argc), argv, &help);
  if (!gargs.ok()) {
    std::fprintf(stderr, "turnstile: %s\n", std::string(gargs.status().message()).c_str());
    return kExitUsage;
  }
  if (g.output != "text" && g.output != "json") {
    std::fprintf(stderr, "turnstile: --output must be text or json\n");
    return kExitUsage;
  }
  if (cmd_index >= argc) {
    std::fputs(GeneralUsage().c_str(), help ? stdout : stderr);
    return help ? 0 : kExitUsage;
  }
  std::string cmd = argv[cmd_index];
  if (help || cmd == "help") {
    // `turnstile help`, `turnstile --help [COMMAND]`, `turnstile help COMMAND`.
    const int at = cmd == "help" ? cmd_index + 1 : cmd_index;
    if (at >= argc || IsHelp(argv[at])) {
      std::fputs(GeneralUsage().c_str(), stdout);
      return 0;
    }
    std::string word = argv[at];
    std::string flag = "--help";
    char* help_argv[] = {word.data(), flag.data(), nullptr};
    return Dispatch(g, stop, word, 2, help_argv);
  }
  return Dispatch(g, stop, cmd, argc - cmd_index, argv + cmd_index);
}
