// `turnstile elect` and `turnstile observe`, over the client
// library's election recipe and Client::Observe.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli_common.h"
#include "client/json_quote.h"
#include "client/lib/coordination.h"

namespace turnstile::cli {

using turnstile::JsonQuote;
using turnstile::client::Contender;
using turnstile::client::Election;
using turnstile::client::ElectionOptions;
using turnstile::client::LockObservation;

namespace {

// Splits `argv` at "--": the flags and positionals before it, the command after.
int FindDashes(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") return i;
  }
  return -1;
}

std::string MetadataJson(const std::map<std::string, std::string>& m) {
  std::string out = "{";
  for (const auto& [k, v] : m) {
    if (out.size() > 1) out += ",";
    absl::StrAppend(&out, JsonQuote(k), ":", JsonQuote(v));
  }
  return out + "}";
}

std::string ObservationLine(const Globals& g, const LockObservation& o) {
  if (g.json()) {
    if (!o.known) {
      return absl::StrCat("{\"state\":\"unknown\",\"name\":", JsonQuote(o.name),
                          ",\"message\":", JsonQuote(o.message), "}");
    }
    std::string holders = "[";
    for (size_t i = 0; i < o.holders.size(); ++i) {
      const Contender& h = o.holders[i];
      absl::StrAppend(&holders, i ? "," : "", "{\"owner\":", JsonQuote(h.owner),
                      ",\"identity\":", JsonQuote(h.identity), ",\"fencing_token\":",
                      h.fencing_token, ",\"replica_id\":", JsonQuote(h.replica_id),
                      h.granted_unix_ms > 0 ? absl::StrCat(",\"granted_unix_ms\":", h.granted_unix_ms)
                                            : std::string(),
                      ",\"metadata\":", MetadataJson(h.metadata), "}");
    }
    return absl::StrCat("{\"state\":\"current\",\"name\":", JsonQuote(o.name),
                        ",\"waiters\":", o.waiters,
                        o.max_holders > 0 ? absl::StrCat(",\"max_holders\":", o.max_holders)
                                          : std::string(),
                        ",\"holders\":", holders, "]}");
  }
  if (!o.known) return absl::StrCat("UNKNOWN ", o.message);
  if (o.holders.empty()) return absl::StrCat("FREE waiters=", o.waiters);
  std::vector<std::string> parts;
  for (const Contender& h : o.holders) {
    auto v = h.metadata.find(turnstile::client::kLeaderValueKey);
    parts.push_back(absl::StrCat("owner=", h.owner, " fencing_token=", h.fencing_token,
                                 v != h.metadata.end() ? " value=" + v->second : std::string()));
  }
  return absl::StrCat("HELD holders=", o.holders.size(), " waiters=", o.waiters, " ",
                      absl::StrJoin(parts, "; "));
}

}  // namespace

int CmdElect(const Globals& g, StopSignals& stop, int argc, char** argv) {
  Millis timeout(0), grace(10000), lock_delay(0);
  FlagSet f("turnstile elect NAME VALUE [flags] -- CMD ARGS...");
  f.Duration("timeout", &timeout, "give up if not leader within this (0 = campaign until stopped)");
  f.Duration("grace", &grace,
             "when leadership ends or is revoked: time between SIGTERM and SIGKILL to CMD");
  f.Duration("lock-delay", &lock_delay,
             "if a leader vanishes without resigning, the next term waits this long (0..60s)");
  bool help = false;
  const int dashes = FindDashes(argc, argv);
  auto args = f.Parse(dashes < 0 ? argc : dashes, argv, &help);
  const std::string usage = CommandHelp(
      "turnstile [global flags] elect NAME VALUE [flags] -- CMD [ARGS...]",
      "Campaigns in election NAME with VALUE (the leader's value, shown by `observe`),\n"
      "then runs CMD while leader. CMD gets TURNSTILE_LOCK_NAME, TURNSTILE_FENCING_TOKEN\n"
      "(the term: pass it to whatever the leader writes to) and TURNSTILE_LEASE_ID (for\n"
      "`turnstile revoke`, which makes the leader step down). Leadership is resigned only\n"
      "after CMD has exited, whatever ended it, so two leaders' commands never overlap:\n"
      "  - revoked (turnstile revoke) or lost: CMD gets SIGTERM, then SIGKILL after --grace;\n"
      "  - SIGINT / SIGTERM to turnstile: passed to CMD (SIGHUP as SIGTERM);\n"
      "  - CMD exits by itself.\n"
      "A stop signal while campaigning gives the campaign up: nothing stays queued and\n"
      "CMD never starts. CMD does not outlive turnstile: if turnstile is killed (even\n"
      "kill -9), CMD gets SIGKILL. Waits capped by the replica (--max-wait-timeout), a\n"
      "draining replica and RESOURCE_EXHAUSTED are retried inside.\n"
      "Exit: CMD's code (128+N if killed by signal N; also after a revoke); 75 not elected\n"
      "within --timeout; 76 leadership lost; 127 CMD could not be run; 130 / 143 / 129\n"
      "SIGINT / SIGTERM / SIGHUP while campaigning; 1 server error; 2 usage.",
      &f);
  if (help) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (!args.ok() || args->size() != 2 || dashes < 0 || dashes + 1 >= argc) {
    std::fprintf(stderr, "turnstile elect: %s\n\n%s",
                 args.ok() ? "needs NAME VALUE -- CMD [ARGS...]"
                           : std::string(args.status().message()).c_str(),
                 usage.c_str());
    return kExitUsage;
  }
  const std::string name = (*args)[0], value = (*args)[1];
  std::vector<std::string> command;
  for (int i = dashes + 1; i < argc; ++i) command.push_back(argv[i]);
  auto client = Connect(g);
  if (!client.ok()) return ReportError(g, client.status());

  LockWatch watch;
  std::atomic<bool> revoked{false};
  std::atomic<bool> elected{false};
  ElectionOptions eo;
  eo.lock_delay = lock_delay;
  eo.owner = g.owner;
  // Asked to step down: CMD is stopped first (as for a loss), and
  // leadership resigned only once it has exited (below), so the next
  // leader's command cannot start while this one still runs.
  eo.resign_on_revoke = false;
  eo.on_revoke = [&](const std::string& requester, const std::string& reason) {
    if (g.json()) {
      PrintLine(absl::StrCat("{\"event\":\"revoke_requested\",\"requester\":", JsonQuote(requester),
                             ",\"reason\":", JsonQuote(reason), "}"));
    } else {
      PrintLine(absl::StrCat("REVOKE_REQUESTED requester=", requester, " reason=", reason));
    }
    revoked = true;
    LockStatus s;
    s.state = LockState::kLost;
    s.lost_reason = "REVOKED";
    watch.OnChange(s);
  };
  eo.on_leadership = [&](bool leader, const std::string& reason) {
    if (!elected.load()) {
      // Before Campaign returned (reported below); a loss still counts.
    } else if (g.json()) {
      PrintLine(absl::StrCat("{\"event\":", JsonQuote(leader ? "leader" : "not_leader"),
                             ",\"reason\":", JsonQuote(reason), "}"));
    } else {
      PrintLine(absl::StrCat(leader ? "LEADER" : "NOT_LEADER", " reason=", reason));
    }
    // In doubt (SUSPENDED) is not the end: like `run`, CMD is stopped when
    // the hold is lost (the replica reports LOST before anyone else could
    // be elected), released or revoked.
    if (leader || reason == "SUSPENDED" || reason == "RESIGNED") return;
    LockStatus s;
    s.state = LockState::kLost;
    s.lost_reason = reason;
    watch.OnChange(s);
  };
  Election election(client->get(), name, eo);
  stop.BeginWait();
  absl::Status st = election.Campaign(value, timeout > Millis(0) ? timeout : Millis::max());
  if (!st.ok()) {
    if (const int sig = stop.EndWait(); sig != 0) return ReportAbandoned(g, sig, "election " + name);
    return ReportError(g, st);
  }
  if (const int sig = stop.Abandoned(); sig != 0) {
    (void)election.Resign();  // elected as the signal came
    return ReportAbandoned(g, sig, "election " + name);
  }
  elected = true;
  const uint64_t term = election.Term();
  if (g.json()) {
    PrintLine(absl::StrCat("{\"event\":\"elected\",\"name\":", JsonQuote(name), ",\"term\":", term,
                           ",\"value\":", JsonQuote(value), "}"));
  } else {
    PrintLine(absl::StrCat("ELECTED term=", term, " value=", value));
  }
  if (!election.IsLeader()) {
    // Lost between the grant and here: nothing ran.
    std::lock_guard<std::mutex> l(watch.mu);
    if (watch.lost) {
      stop.EndWait();
      return kExitLost;
    }
  }
  std::atomic<pid_t> running{0};
  ChildOutcome child = RunChild(
      stop, watch, command,
      {"TURNSTILE_LOCK_NAME=" + name, absl::StrCat("TURNSTILE_FENCING_TOKEN=", term),
       "TURNSTILE_LEASE_ID=" + election.LeaseId()},
      grace,
      &running, "leadership of " + name, [&](pid_t pid) {
        if (g.json()) PrintLine(absl::StrCat("{\"event\":\"running\",\"pid\":", pid, "}"));
      });
  // Only now, CMD having exited: the next leader's command cannot overlap.
  absl::Status resigned = election.Resign();
  if (child.abandoned != 0) return ReportAbandoned(g, child.abandoned, "election " + name);
  if (!child.started) return child.code;
  if (child.lost && !revoked.load()) {
    if (g.json()) PrintLine("{\"event\":\"lost\"}");
    return kExitLost;
  }
  if (g.json()) PrintLine(absl::StrCat("{\"event\":\"exited\",\"code\":", child.code, "}"));
  if (!resigned.ok()) ReportError(g, resigned);
  return child.code;
}

int CmdObserve(const Globals& g, StopSignals& stop, int argc, char** argv) {
  int64_t count = 0;
  FlagSet f("turnstile observe NAME [flags]");
  f.Int("count", &count, "exit after this many lines (0 = until interrupted)");
  bool help = false;
  auto args = f.Parse(argc, argv, &help);
  const std::string usage = CommandHelp(
      "turnstile [global flags] observe NAME [flags]",
      "Prints the holders of NAME (an election's leader) now and at every change, one\n"
      "line each: HELD holders=N waiters=W owner=... fencing_token=... value=...; FREE\n"
      "waiters=W; UNKNOWN (the replica lost ZooKeeper, or the stream is being re-made).\n"
      "With --output json one object per line. Runs until interrupted (SIGINT, SIGTERM)\n"
      "or --count lines.\n"
      "Exit: 0; 1 server error; 2 usage.",
      &f);
  if (help) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (!args.ok() || args->size() != 1 || count < 0) {
    std::fprintf(stderr, "turnstile observe: %s\n\n%s",
                 !args.ok() ? std::string(args.status().message()).c_str()
                            : "needs exactly one NAME (and --count >= 0)",
                 usage.c_str());
    return kExitUsage;
  }
  auto client = Connect(g);
  if (!client.ok()) return ReportError(g, client.status());
  stop.EndWait();  // from now on a stop signal ends the observation (exit 0)
  std::mutex mu;
  int64_t printed = 0;
  std::optional<absl::Status> failed;
  auto observation = (*client)->Observe(
      (*args)[0],
      [&](const LockObservation& o) {
        std::lock_guard<std::mutex> l(mu);
        if (count > 0 && printed >= count) return;
        PrintLine(ObservationLine(g, o));
        if (++printed == count) stop.Wake();  // wakes the wait below
      },
      [&](const absl::Status& s) {
        {
          std::lock_guard<std::mutex> l(mu);
          failed = s;
        }
        stop.Wake();
      });
  if (!observation.ok()) return ReportError(g, observation.status());
  stop.Wait(std::nullopt);  // a signal, or Wake
  (*observation)->Stop();
  std::lock_guard<std::mutex> l(mu);
  if (failed) return ReportError(g, *failed);
  return 0;
}

}  // namespace turnstile::cli
